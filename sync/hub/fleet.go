package hub

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver

	"github.com/podvisor/podvisor/sync/protocol"
)

var fleetSchema = `
CREATE TABLE IF NOT EXISTS devices (
	id        TEXT PRIMARY KEY,
	labels    BLOB NOT NULL DEFAULT '{}',
	online    INTEGER NOT NULL DEFAULT 0,
	last_seen INTEGER NOT NULL DEFAULT 0,
	version   TEXT NOT NULL DEFAULT '',
	node      BLOB
);
CREATE TABLE IF NOT EXISTS desired (
	device     TEXT PRIMARY KEY,
	generation INTEGER NOT NULL,
	pods       BLOB NOT NULL,
	document   BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS acks (
	device     TEXT PRIMARY KEY,
	generation INTEGER NOT NULL,
	observed   INTEGER NOT NULL,
	error      TEXT NOT NULL,
	results    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS mirrors (
	device  TEXT NOT NULL,
	key     TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	pod     BLOB NOT NULL,
	PRIMARY KEY (device, key)
);
CREATE TABLE IF NOT EXISTS events (
	device TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	key    TEXT NOT NULL,
	event  BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_device ON events(device, seq);
CREATE TABLE IF NOT EXISTS cursors (
	device TEXT PRIMARY KEY,
	epoch  TEXT NOT NULL,
	seq    INTEGER NOT NULL
);`

// Fleet is the hub's SQLite state: devices, desired documents, the
// devices' acks, mirror pods and events, and per-device outbox cursors.
type Fleet struct{ db *sql.DB }

// OpenFleet opens or creates the fleet database.
func OpenFleet(path string) (*Fleet, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(fleetSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("fleet database %s: %w", path, err)
	}
	return &Fleet{db: db}, nil
}

// Close closes the database.
func (f *Fleet) Close() error { return f.db.Close() }

func (f *Fleet) touch(tx *sql.Tx, device string, at time.Time) error {
	_, err := tx.Exec(`INSERT INTO devices (id, last_seen) VALUES (?, ?)
		ON CONFLICT(id) DO UPDATE SET last_seen = MAX(last_seen, excluded.last_seen)`, device, at.UnixMilli())
	return err
}

// ApplyStatus stores a status batch exactly once in effect: items at or
// below the device's cursor are duplicates (QoS 1 redelivery, a resend
// after a lost receipt) and are skipped; the rest and the new cursor are
// written in one transaction. It returns the cursor, which the hub sends
// back as the device's receipt, and how many items were new. A batch that
// follows a sequence number past the cursor means one was missed: it is
// not stored, and gap asks the device to resend from the cursor.
func (f *Fleet) ApplyStatus(b *protocol.StatusBatch, at time.Time) (cursor int64, applied int, gap bool, err error) {
	tx, err := f.db.Begin()
	if err != nil {
		return 0, 0, false, err
	}
	defer tx.Rollback()
	var epoch string
	err = tx.QueryRow(`SELECT epoch, seq FROM cursors WHERE device = ?`, b.Device).Scan(&epoch, &cursor)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && epoch != b.Epoch) {
		// A new outbox on the device (first contact, or its database was
		// recreated): its sequence starts again.
		cursor = 0
	} else if err != nil {
		return 0, 0, false, err
	} else if b.After > cursor {
		return cursor, 0, true, nil // a batch is missing before this one
	}
	for _, it := range b.Items {
		if it.Seq <= cursor {
			continue
		}
		cursor = it.Seq
		applied++
		switch {
		case it.Event != nil:
			ev, _ := json.Marshal(it.Event)
			_, err = tx.Exec(`INSERT INTO events (device, seq, key, event) VALUES (?, ?, ?, ?)`, b.Device, it.Seq, it.Key, ev)
		case it.Pod == nil:
			_, err = tx.Exec(`DELETE FROM mirrors WHERE device = ? AND key = ?`, b.Device, it.Key)
		default:
			pod, _ := json.Marshal(it.Pod)
			_, err = tx.Exec(`INSERT INTO mirrors (device, key, seq, pod) VALUES (?, ?, ?, ?)
				ON CONFLICT(device, key) DO UPDATE SET seq = excluded.seq, pod = excluded.pod WHERE excluded.seq > mirrors.seq`,
				b.Device, it.Key, it.Seq, pod)
		}
		if err != nil {
			return 0, 0, false, err
		}
	}
	if _, err := tx.Exec(`INSERT INTO cursors (device, epoch, seq) VALUES (?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq`, b.Device, b.Epoch, cursor); err != nil {
		return 0, 0, false, err
	}
	if err := f.touch(tx, b.Device, at); err != nil {
		return 0, 0, false, err
	}
	return cursor, applied, false, tx.Commit()
}

// SaveAck records a device's answer to its desired document.
func (f *Fleet) SaveAck(a *protocol.Ack, at time.Time) error {
	results, _ := json.Marshal(a.Pods)
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO acks (device, generation, observed, error, results) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, observed = excluded.observed,
		error = excluded.error, results = excluded.results`, a.Device, a.Generation, a.ObservedGeneration, a.Error, results); err != nil {
		return err
	}
	if err := f.touch(tx, a.Device, at); err != nil {
		return err
	}
	return tx.Commit()
}

// ForgetPresence marks every device offline: at the hub's start, the
// retained presence messages (or the devices' reconnections, with a
// broker that kept none) tell again which are online.
func (f *Fleet) ForgetPresence() error {
	_, err := f.db.Exec(`UPDATE devices SET online = 0`)
	return err
}

// SavePresence records a device going on or off line.
func (f *Fleet) SavePresence(device string, online bool, at time.Time) error {
	_, err := f.db.Exec(`INSERT INTO devices (id, online, last_seen) VALUES (?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET online = excluded.online, last_seen = MAX(last_seen, excluded.last_seen)`, device, online, at.UnixMilli())
	return err
}

// SaveHeartbeat records a device's node status. Labels the device
// reports are added to its labels where the key is not set yet: the
// labels set at the hub (podhub label) win.
func (f *Fleet) SaveHeartbeat(h *protocol.Heartbeat, at time.Time) error {
	node, _ := json.Marshal(h.Node)
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO devices (id, last_seen, version, node) VALUES (?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET last_seen = MAX(last_seen, excluded.last_seen), version = excluded.version, node = excluded.node`,
		h.Device, at.UnixMilli(), h.Version, node); err != nil {
		return err
	}
	if len(h.Labels) > 0 {
		var raw []byte
		if err := tx.QueryRow(`SELECT labels FROM devices WHERE id = ?`, h.Device).Scan(&raw); err != nil {
			return err
		}
		labels := map[string]string{}
		json.Unmarshal(raw, &labels)
		for k, v := range h.Labels {
			if _, set := labels[k]; !set {
				labels[k] = v
			}
		}
		raw, _ = json.Marshal(labels)
		if _, err := tx.Exec(`UPDATE devices SET labels = ? WHERE id = ?`, raw, h.Device); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// DesiredDoc is a device's current desired document at the hub.
type DesiredDoc struct {
	Device     string
	Generation int64
	Pods       []json.RawMessage
	Document   []byte // signed, as published
}

// Desired returns a device's desired document (generation 0: none yet).
func (f *Fleet) Desired(device string) (DesiredDoc, error) {
	d := DesiredDoc{Device: device}
	var pods []byte
	err := f.db.QueryRow(`SELECT generation, pods, document FROM desired WHERE device = ?`, device).Scan(&d.Generation, &pods, &d.Document)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(pods, &d.Pods)
}

// SaveDesired stores a device's next desired document; it fails if
// another writer moved the generation meanwhile.
func (f *Fleet) SaveDesired(d DesiredDoc) error {
	pods, _ := json.Marshal(d.Pods)
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var current int64
	if err := tx.QueryRow(`SELECT COALESCE(MAX(generation), 0) FROM desired WHERE device = ?`, d.Device).Scan(&current); err != nil {
		return err
	}
	if current != d.Generation-1 {
		return fmt.Errorf("device %s: generation %d is stored, cannot store %d", d.Device, current, d.Generation)
	}
	if _, err := tx.Exec(`INSERT INTO desired (device, generation, pods, document) VALUES (?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, pods = excluded.pods, document = excluded.document`,
		d.Device, d.Generation, pods, d.Document); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO devices (id) VALUES (?) ON CONFLICT(id) DO NOTHING`, d.Device); err != nil {
		return err
	}
	return tx.Commit()
}

// AllDesired lists every stored desired document, to publish again.
func (f *Fleet) AllDesired() ([]DesiredDoc, error) {
	rows, err := f.db.Query(`SELECT device, generation, document FROM desired`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DesiredDoc
	for rows.Next() {
		var d DesiredDoc
		if err := rows.Scan(&d.Device, &d.Generation, &d.Document); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// SaveRejection records a refused message as a Warning event of the
// device (seq 0: outside its outbox sequence).
func (f *Fleet) SaveRejection(device, reason string, at time.Time) error {
	ev, _ := json.Marshal(protocol.Event{Time: at, Type: "Warning", Reason: "MessageRejected", Message: reason})
	_, err := f.db.Exec(`INSERT INTO events (device, seq, key, event) VALUES (?, 0, '', ?)`, device, ev)
	return err
}

// Mirror is a device's pod as last reported.
type Mirror struct {
	Key string
	Seq int64
	Pod json.RawMessage
}

// Mirrors lists a device's mirror pods.
func (f *Fleet) Mirrors(device string) ([]Mirror, error) {
	rows, err := f.db.Query(`SELECT key, seq, pod FROM mirrors WHERE device = ? ORDER BY key`, device)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Mirror
	for rows.Next() {
		var m Mirror
		if err := rows.Scan(&m.Key, &m.Seq, &m.Pod); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// LastAck is a device's last answer to its desired document, or nil.
func (f *Fleet) LastAck(device string) (*protocol.Ack, error) {
	a := &protocol.Ack{Device: device}
	var results []byte
	err := f.db.QueryRow(`SELECT generation, observed, error, results FROM acks WHERE device = ?`, device).
		Scan(&a.Generation, &a.ObservedGeneration, &a.Error, &results)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a, json.Unmarshal(results, &a.Pods)
}

// Events lists a device's events in order; rejections of its messages
// come first.
func (f *Fleet) Events(device string) ([]protocol.Event, error) {
	rows, err := f.db.Query(`SELECT event FROM events WHERE device = ? ORDER BY seq, rowid`, device)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []protocol.Event
	for rows.Next() {
		var raw []byte
		var e protocol.Event
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
