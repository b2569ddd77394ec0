package fleetdb

// PodPhases counts the fleet's pods by phase, as the Kubernetes API at
// the hub lists them: every device's mirror pods by the phase it last
// reported, and the hub's pods no device reports yet by their stored
// phase (Pending when none). Phases are as reported, unchecked: the
// caller bounds them. One query over the summary columns, no JSON of a
// mirror decoded.
func (f *Fleet) PodPhases() (map[string]int, error) {
	rows, err := f.db.Query(`SELECT phase, COUNT(*) FROM (
			SELECT phase FROM mirrors
			UNION ALL
			SELECT COALESCE(NULLIF(json_extract(CAST(h.pod AS TEXT), '$.status.phase'), ''), 'Pending') FROM hub_pods h
				WHERE h.device = '' OR NOT EXISTS (SELECT 1 FROM mirrors m WHERE m.device = h.device AND m.key = h.namespace || '/' || h.name))
		GROUP BY phase`)
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
