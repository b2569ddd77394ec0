package store

import (
	"database/sql"
	"fmt"
)

// Item is a status or event to send to the hub.
type Item struct {
	Key     string // the pod's namespace/name
	Kind    string // KindPod or KindEvent
	Payload []byte // a pod with no payload is gone from the device
}

// Row is an outbox item with its sequence number.
type Row struct {
	Seq int64
	Item
}

// Stats describe the outbox.
type Stats struct {
	Rows    int
	Bytes   int64
	Dropped int64 // events dropped to keep within the limits, ever
	Acked   int64 // the highest sequence number the hub has stored
}

// Add appends items in one transaction: the caller batches many status
// changes into one commit, which in WAL mode with synchronous=NORMAL
// writes the log without an fsync. A pod's item replaces its older one
// (sent or not: the hub keeps the newest it has seen). Events over the
// limits are dropped oldest first.
func (s *Store) Add(items []Item) error {
	if len(items) == 0 {
		return nil
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, it := range items {
		if it.Kind == KindPod {
			if _, err := tx.Exec(`DELETE FROM outbox WHERE key = ? AND kind = ?`, it.Key, KindPod); err != nil {
				return err
			}
		}
		payload := it.Payload
		if payload == nil {
			payload = []byte{} // a pod gone from the device
		}
		if _, err := tx.Exec(`INSERT INTO outbox (key, kind, payload) VALUES (?, ?, ?)`, it.Key, it.Kind, payload); err != nil {
			return err
		}
	}
	if err := s.enforceLimits(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// enforceLimits drops the oldest events until the outbox fits, or only
// pods' newest statuses are left.
func (s *Store) enforceLimits(tx *sql.Tx) error {
	for {
		var rows int
		var bytes int64
		if err := tx.QueryRow(`SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox`).Scan(&rows, &bytes); err != nil {
			return err
		}
		over := rows - s.limits.Rows
		if bytes > s.limits.Bytes && over < 1 {
			over = max(1, rows/100) // shed bytes a slice at a time
		}
		if over < 1 {
			return nil
		}
		res, err := tx.Exec(`DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE kind = ? ORDER BY seq LIMIT ?)`, KindEvent, over)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if n == 0 {
			return nil // only pod statuses: those are never dropped
		}
		if _, err := tx.Exec(`UPDATE outbox_meta SET dropped = dropped + ? WHERE id = 1`, n); err != nil {
			return err
		}
	}
}

// Next returns up to n items after seq, in sequence order.
func (s *Store) Next(after int64, n int) ([]Row, error) {
	rs, err := s.db.Query(`SELECT seq, key, kind, payload FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?`, after, n)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Seq, &r.Key, &r.Kind, &r.Payload); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// Ack forgets every item up to seq: the hub has stored them.
func (s *Store) Ack(seq int64) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM outbox WHERE seq <= ?`, seq); err != nil {
		return err
	}
	if _, err := tx.Exec(`UPDATE outbox_meta SET acked = MAX(acked, ?) WHERE id = 1`, seq); err != nil {
		return err
	}
	return tx.Commit()
}

// Stats reads the outbox's size and counters.
func (s *Store) Stats() (Stats, error) {
	var st Stats
	err := s.db.QueryRow(`SELECT (SELECT COUNT(*) FROM outbox), (SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM outbox), dropped, acked
		FROM outbox_meta WHERE id = 1`).Scan(&st.Rows, &st.Bytes, &st.Dropped, &st.Acked)
	return st, err
}
