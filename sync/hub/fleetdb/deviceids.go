package fleetdb

// DeviceIDs is every device the fleet knows, by ID (podhub get
// replicas counts the devices each replica's buckets hold).
func (f *Fleet) DeviceIDs() ([]string, error) {
	rows, err := f.db.Query(`SELECT id FROM devices ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
