package fleetdb

import (
	"database/sql"
	"errors"
)

// EachDesiredPods calls fn with every device's stored desired pods, as
// stored (JSON), without decoding them.
func (f *Fleet) EachDesiredPods(fn func(device string, pods []byte)) error {
	rows, err := f.db.Query(`SELECT device, pods FROM desired`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var dev string
		var raw []byte
		if err := rows.Scan(&dev, &raw); err != nil {
			return err
		}
		fn(dev, raw)
	}
	return rows.Err()
}

// DesiredPods is one device's stored desired pods, as stored (JSON); nil
// for a device without a document.
func (f *Fleet) DesiredPods(device string) ([]byte, error) {
	var raw []byte
	err := f.db.QueryRow(`SELECT pods FROM desired WHERE device = ?`, device).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return raw, err
}

// Stopped says whether a device confirmed that a pod (key: namespace/name)
// no longer runs: it applied its newest desired generation and reports
// no such pod.
func (f *Fleet) Stopped(device, key string) (bool, error) {
	var gen, observed int64
	var mirrored bool
	err := f.db.QueryRow(`SELECT COALESCE((SELECT generation FROM desired WHERE device = ?), 0),
		COALESCE((SELECT observed FROM acks WHERE device = ?), 0),
		EXISTS (SELECT 1 FROM mirrors WHERE device = ? AND key = ?)`, device, device, device, key).Scan(&gen, &observed, &mirrored)
	return observed >= gen && !mirrored, err
}
