package fleetdb

import (
	"encoding/json"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// DeviceStates lists every device as Devices does, but only what the
// hub's /metrics reads of it: ID, version, presence, Ready, last seen,
// fence, generations and the metrics snapshot. Labels, node status,
// network summary, pods and update state are left empty: decoding each
// device's node status was half a 1,000-device scrape.
func (f *Fleet) DeviceStates(now time.Time, timeout time.Duration) ([]Device, error) {
	rows, err := f.db.Query(`SELECT d.id, d.online, d.last_seen, d.version, d.metrics, d.duplicate_until, d.fenced_at,
		COALESCE((SELECT generation FROM desired WHERE device = d.id), 0),
		COALESCE((SELECT observed FROM acks WHERE device = d.id), 0)
		FROM devices d ORDER BY d.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Device
	for rows.Next() {
		var d Device
		var metrics []byte
		var lastSeen, dupUntil, fencedAt int64
		if err := rows.Scan(&d.ID, &d.Online, &lastSeen, &d.Version, &metrics, &dupUntil, &fencedAt, &d.Generation, &d.ObservedGeneration); err != nil {
			return nil, err
		}
		if len(metrics) > 0 {
			d.Metrics = &protocol.MetricsSnapshot{}
			json.Unmarshal(metrics, d.Metrics)
		}
		d.judge(now, timeout, lastSeen, dupUntil, fencedAt)
		out = append(out, d)
	}
	return out, rows.Err()
}

// judge sets what a device's stored times say of it now: last seen,
// fenced, a duplicate ID, and Ready (online, heard from within timeout,
// its ID its own).
func (d *Device) judge(now time.Time, timeout time.Duration, lastSeen, dupUntil, fencedAt int64) {
	d.DuplicateID = now.UnixMilli() < dupUntil
	if lastSeen > 0 {
		d.LastSeen = time.UnixMilli(lastSeen)
	}
	if fencedAt > 0 {
		t := time.UnixMilli(fencedAt)
		d.FencedAt = &t
	}
	d.Ready = d.Online && now.Sub(d.LastSeen) < timeout && !d.DuplicateID
}
