package fleetdb

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// deviceObjectsTables keep, per device, the sealing key the hub pins
// (enrolled by podhub device add, or the first one a device enrolled
// before announced), a refused other key, and the object index last
// published, whose generation only grows; and when the operator revoked
// the device.
const deviceObjectsTables = `CREATE TABLE device_objects (
	device          TEXT PRIMARY KEY,
	seal_key        BLOB,
	seal_key_source TEXT NOT NULL DEFAULT '',
	seal_key_at     INTEGER NOT NULL DEFAULT 0,
	refused_key     TEXT NOT NULL DEFAULT '',
	refused_at      INTEGER NOT NULL DEFAULT 0,
	generation      INTEGER NOT NULL DEFAULT 0,
	entries         BLOB NOT NULL DEFAULT '[]',
	document        BLOB,
	omitted         BLOB NOT NULL DEFAULT '[]'
);
ALTER TABLE devices ADD COLUMN revoked_at INTEGER NOT NULL DEFAULT 0;`

// How a device's sealing key came to be pinned.
const (
	SealKeyEnrolled  = "enrolled"  // podhub device add made it
	SealKeyAnnounced = "announced" // trust on first use: the device's first announcement
)

// DeviceObjects is what the hub keeps of a device's ConfigMaps and
// Secrets: never their data, only which versions it was told of.
type DeviceObjects struct {
	// SealKey is the pinned public sealing key (nil: none known yet);
	// SealKeySource says how it came (SealKeyEnrolled, SealKeyAnnounced).
	SealKey       []byte    `json:"-"`
	SealKeySource string    `json:"sealKeySource,omitempty"`
	SealKeyAt     time.Time `json:"sealKeyAt,omitzero"`
	// SealKeyFingerprint is the pinned key's fingerprint (SealKeyPrint).
	SealKeyFingerprint string `json:"sealKeyFingerprint,omitempty"`
	// RefusedKey is the fingerprint of the last key announced that was
	// not the pinned one, and when.
	RefusedKey string    `json:"refusedKey,omitempty"`
	RefusedAt  time.Time `json:"refusedAt,omitzero"`
	// Generation and Entries are the index last published.
	Generation int64                  `json:"generation"`
	Entries    []protocol.ObjectEntry `json:"entries"`
	Document   []byte                 `json:"-"`
	// Omitted are the objects left out of the index and why (the
	// device's bounds).
	Omitted []string `json:"omitted,omitempty"`
	// RevokedAt is when the operator revoked the device (zero: it is not).
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// SealKeyPrint is a key's fingerprint as shown and logged: the first
// 16 bytes of its SHA-256, hex, never the key.
func SealKeyPrint(pub []byte) string {
	sum := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// DeviceObjects reads a device's object state (zero for none).
func (f *Fleet) DeviceObjects(device string) (DeviceObjects, error) {
	var d DeviceObjects
	var entries, omitted []byte
	var keyAt, refusedAt, revokedAt int64
	err := f.db.QueryRow(`SELECT revoked_at FROM devices WHERE id = ?`, device).Scan(&revokedAt)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return d, err
	}
	if revokedAt > 0 {
		d.RevokedAt = time.UnixMilli(revokedAt)
	}
	err = f.db.QueryRow(`SELECT seal_key, seal_key_source, seal_key_at, refused_key, refused_at, generation, entries, document, omitted
		FROM device_objects WHERE device = ?`, device).
		Scan(&d.SealKey, &d.SealKeySource, &keyAt, &d.RefusedKey, &refusedAt, &d.Generation, &entries, &d.Document, &omitted)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if keyAt > 0 {
		d.SealKeyAt = time.UnixMilli(keyAt)
	}
	if refusedAt > 0 {
		d.RefusedAt = time.UnixMilli(refusedAt)
	}
	if len(d.SealKey) > 0 {
		d.SealKeyFingerprint = SealKeyPrint(d.SealKey)
	}
	if err := json.Unmarshal(entries, &d.Entries); err != nil {
		return d, fmt.Errorf("device %s: object index entries: %w", device, err)
	}
	return d, json.Unmarshal(omitted, &d.Omitted)
}

// EnrolSealKey pins the sealing key podhub device add made for a device
// (replacing any: enrolling again is the operator's word), and clears a
// revocation (a device enrolled again is trusted again).
func (f *Fleet) EnrolSealKey(device string, pub []byte, at time.Time) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO device_objects (device, seal_key, seal_key_source, seal_key_at) VALUES (?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET seal_key = excluded.seal_key, seal_key_source = excluded.seal_key_source,
		seal_key_at = excluded.seal_key_at, refused_key = '', refused_at = 0`, device, pub, SealKeyEnrolled, at.UnixMilli()); err != nil {
		return err
	}
	if _, err := tx.Exec(`UPDATE devices SET revoked_at = 0 WHERE id = ?`, device); err != nil {
		return err
	}
	return tx.Commit()
}

// ErrSealKeyMismatch is an announced sealing key other than the pinned one.
var ErrSealKeyMismatch = errors.New("a sealing key other than the one pinned for the device (enrolled, or first announced); refused: enrol the device again (podhub device revoke, then device add) to give it a new key")

// AnnounceSealKey takes a device's announced sealing key: pinned when
// the device has none (trust on first use), accepted when it is the
// pinned one, otherwise recorded as refused (its fingerprint) and
// ErrSealKeyMismatch. pinned says it was newly pinned.
func (f *Fleet) AnnounceSealKey(device string, pub []byte, at time.Time) (pinned bool, err error) {
	// The device's own row; enrolment and the object indexes are
	// fleet-wide transactions, SaveOmitted one statement of other columns.
	tx, err := f.beginDevice(device)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var known bool
	if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM devices WHERE id = ?)`, device).Scan(&known); err != nil {
		return false, err
	}
	if !known {
		return false, fmt.Errorf("device %q: %w", device, ErrUnknownDevice)
	}
	var have []byte
	err = tx.QueryRow(`SELECT seal_key FROM device_objects WHERE device = ?`, device).Scan(&have)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	switch {
	case len(have) == 0:
		if _, err := tx.Exec(`INSERT INTO device_objects (device, seal_key, seal_key_source, seal_key_at) VALUES (?, ?, ?, ?)
			ON CONFLICT(device) DO UPDATE SET seal_key = excluded.seal_key, seal_key_source = excluded.seal_key_source,
			seal_key_at = excluded.seal_key_at`, device, pub, SealKeyAnnounced, at.UnixMilli()); err != nil {
			return false, err
		}
		return true, tx.Commit()
	case string(have) == string(pub):
		return false, nil
	}
	if _, err := tx.Exec(`UPDATE device_objects SET refused_key = ?, refused_at = ? WHERE device = ?`, SealKeyPrint(pub), at.UnixMilli(), device); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return false, ErrSealKeyMismatch
}

// ObjectIndexDoc is a device's next object index, signed, as stored.
type ObjectIndexDoc struct {
	Device     string
	Generation int64
	Entries    []protocol.ObjectEntry
	Document   []byte
	Omitted    []string
	// OmittedChanged says the objects left out changed (the caller warns).
	OmittedChanged bool
}

// SaveObjectIndex stores a device's next object index; it fails unless
// the generation is the next one (generations only grow, even across a
// hub's restarts).
func (f *Fleet) SaveObjectIndex(device string, generation int64, entries []protocol.ObjectEntry, document []byte, omitted []string) error {
	return f.SaveObjectIndexes([]ObjectIndexDoc{{Device: device, Generation: generation, Entries: entries, Document: document, Omitted: omitted}})
}

// ErrIndexMoved is an object index not stored because its generation is
// not the next one: another writer (another replica) stored one since
// the caller read it.
var ErrIndexMoved = errors.New("another writer stored the device's object index since")

// SaveObjectIndexes stores devices' next object indexes in one
// transaction: all, or none if any generation is not the next one
// (ErrIndexMoved).
func (f *Fleet) SaveObjectIndexes(docs []ObjectIndexDoc) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	current, err := tx.Prepare(`SELECT generation FROM device_objects WHERE device = ?`)
	if err != nil {
		return err
	}
	defer current.Close()
	upsert, err := tx.Prepare(`INSERT INTO device_objects (device, generation, entries, document, omitted) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, entries = excluded.entries,
		document = excluded.document, omitted = excluded.omitted`)
	if err != nil {
		return err
	}
	defer upsert.Close()
	for _, d := range docs {
		var gen int64
		if err := current.QueryRow(d.Device).Scan(&gen); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if gen != d.Generation-1 {
			return fmt.Errorf("device %s: object index generation %d is stored, cannot store %d: %w", d.Device, gen, d.Generation, ErrIndexMoved)
		}
		entries, omitted := d.Entries, d.Omitted
		if entries == nil {
			entries = []protocol.ObjectEntry{}
		}
		if omitted == nil {
			omitted = []string{}
		}
		e, _ := json.Marshal(entries)
		o, _ := json.Marshal(omitted)
		if _, err := upsert.Exec(d.Device, d.Generation, e, d.Document, o); err != nil {
			return err
		}
	}
	devices := make([]string, len(docs))
	for i, d := range docs {
		devices[i] = d.Device
	}
	return f.commit(tx, objectsNotes(devices)...)
}

// SaveOmitted stores what a device's index leaves out, when only that
// changed.
func (f *Fleet) SaveOmitted(device string, omitted []string) error {
	if omitted == nil {
		omitted = []string{}
	}
	o, _ := json.Marshal(omitted)
	_, err := f.db.Exec(`INSERT INTO device_objects (device, omitted) VALUES (?, ?)
		ON CONFLICT(device) DO UPDATE SET omitted = excluded.omitted`, device, o)
	return err
}

// ObjectIndexes lists the object index of every device that has one
// (generation 1 or more), without keys.
func (f *Fleet) ObjectIndexes() (map[string]DeviceObjects, error) {
	rows, err := f.db.Query(`SELECT device, generation, entries, document, omitted FROM device_objects WHERE generation > 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]DeviceObjects{}
	for rows.Next() {
		var id string
		var d DeviceObjects
		var entries, omitted []byte
		if err := rows.Scan(&id, &d.Generation, &entries, &d.Document, &omitted); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(entries, &d.Entries); err != nil {
			return nil, fmt.Errorf("device %s: object index entries: %w", id, err)
		}
		if err := json.Unmarshal(omitted, &d.Omitted); err != nil {
			return nil, fmt.Errorf("device %s: objects left out: %w", id, err)
		}
		out[id] = d
	}
	return out, rows.Err()
}

// SetRevoked marks a device revoked (podhub device revoke): the hub
// ignores its messages and gives it no objects until it is enrolled again.
func (f *Fleet) SetRevoked(device string, at time.Time) error {
	_, err := f.db.Exec(`UPDATE devices SET revoked_at = ? WHERE id = ?`, at.UnixMilli(), device)
	return err
}

// Revoked lists the revoked devices.
func (f *Fleet) Revoked() (map[string]bool, error) {
	rows, err := f.db.Query(`SELECT id FROM devices WHERE revoked_at > 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// SaveDeviceEvent stores a Warning event of the hub's about a device (a
// known one; others are skipped), shown by podhub describe device.
func (f *Fleet) SaveDeviceEvent(device, reason, message string, at time.Time) error {
	defer f.changes.Deliver(device, fleetwatch.Events)
	tx, err := f.beginDevice(device)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var known bool
	if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM devices WHERE id = ?)`, device).Scan(&known); err != nil || !known {
		return err
	}
	if err := f.addEvent(tx, device, protocol.Event{Time: at, Type: "Warning", Reason: reason, Message: message}, at); err != nil {
		return err
	}
	return f.commit(tx, fleetwatch.Note{Device: device, What: fleetwatch.Events})
}

// SealingKey is a device's pinned sealing key (nil: none yet) and whether
// it is revoked; ErrUnknownDevice for a device the fleet does not know.
func (f *Fleet) SealingKey(device string) (pub []byte, revoked bool, err error) {
	var revokedAt int64
	err = f.db.QueryRow(`SELECT d.revoked_at, o.seal_key FROM devices d LEFT JOIN device_objects o ON o.device = d.id WHERE d.id = ?`, device).
		Scan(&revokedAt, &pub)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("device %q: %w", device, ErrUnknownDevice)
	}
	return pub, revokedAt > 0, err
}
