package fleetdb

// MirrorPhases counts every device's mirror pods by the phase it last
// reported (as reported, unchecked: the caller bounds them), in one
// query of the summary column, no JSON decoded.
func (f *Fleet) MirrorPhases() (map[string]int, error) {
	rows, err := f.db.Query(`SELECT phase, COUNT(*) FROM mirrors GROUP BY phase`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var phase string
		var n int
		if err := rows.Scan(&phase, &n); err != nil {
			return nil, err
		}
		out[phase] += n
	}
	return out, rows.Err()
}

// ScheduledMirrorKeys lists the device and key (namespace/name) of each
// mirror of a pod the hub's scheduler placed: ScheduledSummaries' keys
// without the summaries.
func (f *Fleet) ScheduledMirrorKeys(each func(device, key string)) error {
	rows, err := f.db.Query(`SELECT device, key FROM mirrors WHERE scheduled = 1`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var device, key string
		if err := rows.Scan(&device, &key); err != nil {
			return err
		}
		each(device, key)
	}
	return rows.Err()
}
