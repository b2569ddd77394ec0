package store

import (
	"database/sql"
	"errors"
	"fmt"
)

// Item is a status or event to send to the hub.
type Item struct {
	Key     string // the pod's namespace/name
	Kind    string // KindPod or KindEvent
	Payload []byte // a pod with no payload is gone from the device
}

// Row is an outbox item with its sequence number on the wire.
type Row struct {
	Seq int64
	Item
}

// Stats describe the outbox.
type Stats struct {
	Rows     int   // items the hub has not stored yet
	Bytes    int64 // their payloads
	Retained int   // pods' newest statuses the hub has stored, kept for a new epoch
	Dropped  int64 // events dropped to keep within the limits, ever
	Acked    int64 // the highest sequence number the hub has stored
	Assigned int64 // the highest sequence number sent, ever, in this epoch
}

// A row's life: unsent (wseq NULL), sent (wseq given, above acked), and
// stored by the hub (wseq at or below acked). Sent rows are never
// deleted before the hub's receipt, so the numbers on the wire stay
// dense; a pod's newest status is kept after the receipt, so a new epoch
// can report every pod again.

// The outbox's hot queries (prepared on first use).
const (
	qMeta   = `SELECT acked, assigned FROM outbox_meta WHERE id = 1`
	qSent   = `SELECT wseq, key, kind, payload FROM outbox WHERE wseq > ? ORDER BY wseq LIMIT ?`
	qNumber = `UPDATE outbox SET wseq = ? + fresh.n FROM
		(SELECT seq, ROW_NUMBER() OVER (ORDER BY seq) AS n FROM
			(SELECT seq FROM outbox WHERE wseq IS NULL ORDER BY seq LIMIT ?)) AS fresh
		WHERE outbox.seq = fresh.seq`
	qAssigned = `UPDATE outbox_meta SET assigned = ? WHERE id = 1`
	qSettle   = `DELETE FROM outbox WHERE wseq > ? AND wseq <= ? AND (kind = ? OR LENGTH(payload) = 0
		OR EXISTS (SELECT 1 FROM outbox o WHERE o.key = outbox.key AND o.kind = outbox.kind AND o.seq > outbox.seq))`
	qAcked = `UPDATE outbox_meta SET acked = ? WHERE id = 1`
)

// Add appends items in one transaction: the caller batches many status
// changes into one commit, which in WAL mode with synchronous=NORMAL
// writes the log without an fsync. A pod's item replaces its older one
// unless that one is on its way to the hub. Events over the limits are
// dropped oldest first, never one already sent.
func (s *Store) Add(items []Item) error {
	if len(items) == 0 {
		return nil
	}
	s.adding.Lock()
	defer s.adding.Unlock()
	items = newestPerPod(items)
	var added int64
	for _, it := range items {
		added += int64(len(it.Payload))
	}
	chunks := planAdd(items)
	// Prepared before the transaction takes the one connection.
	var queries []string
	for _, c := range chunks {
		queries = append(queries, c.queries()...)
	}
	st, err := s.prepare(queries...)
	if err != nil {
		return err
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, c := range chunks {
		n := len(c.queries())
		if err := c.exec(tx, st[:n]); err != nil {
			return err
		}
		st = st[n:]
	}
	size := s.size
	size.rows += len(items)
	size.bytes += added
	if !size.known || size.rows > s.limits.Rows || size.bytes > s.limits.Bytes {
		rows, bytes, err := s.enforceLimits(tx)
		if err != nil {
			return err
		}
		size.known, size.rows, size.bytes = true, rows, bytes
	}
	if err := tx.Commit(); err != nil {
		s.size.known = false
		return fmt.Errorf("outbox: %w", err)
	}
	s.size = size
	return nil
}

// enforceLimits drops the oldest unsent events until the outbox fits, or
// only pods' newest statuses (and sent events) are left; it returns the
// outbox's size then.
func (s *Store) enforceLimits(tx *sql.Tx) (rows int, bytes int64, err error) {
	for {
		if err := tx.QueryRow(`SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox`).Scan(&rows, &bytes); err != nil {
			return 0, 0, err
		}
		over := rows - s.limits.Rows
		if bytes > s.limits.Bytes && over < 1 {
			over = max(1, rows/100) // shed bytes a slice at a time
		}
		if over < 1 {
			return rows, bytes, nil
		}
		res, err := tx.Exec(`DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE kind = ? AND wseq IS NULL ORDER BY seq LIMIT ?)`, KindEvent, over)
		if err != nil {
			return 0, 0, err
		}
		n, _ := res.RowsAffected()
		if n == 0 {
			return rows, bytes, nil // only pod statuses: those are never dropped
		}
		if _, err := tx.Exec(`UPDATE outbox_meta SET dropped = dropped + ? WHERE id = 1`, n); err != nil {
			return 0, 0, err
		}
	}
}

// Next returns up to n items after sequence number after (at least the
// acked one), in order: those sent before first, then unsent ones, which
// get the next numbers now, so that what goes on the wire is numbered
// without gaps.
func (s *Store) Next(after int64, n int) ([]Row, error) {
	st, err := s.prepare(qMeta, qSent, qNumber, qAssigned)
	if err != nil {
		return nil, err
	}
	tx, err := s.db.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var acked, assigned int64
	if err := tx.Stmt(st[0]).QueryRow().Scan(&acked, &assigned); err != nil {
		return nil, err
	}
	after = max(after, acked)
	out, err := scanRows(tx.Stmt(st[1]).Query(after, n))
	if err != nil {
		return nil, err
	}
	last := after
	if len(out) > 0 {
		last = out[len(out)-1].Seq
	}
	if len(out) == n || last != assigned {
		return out, nil
	}
	// The unsent rows are numbered in one statement (one UPDATE per row
	// was most of the device's cost of a batch), in the order they were
	// added, then read back by their numbers. The LIMIT is inside: a
	// window function numbers every row it is given.
	res, err := tx.Stmt(st[2]).Exec(assigned, n-len(out))
	if err != nil {
		return nil, err
	}
	numbered, err := res.RowsAffected()
	if err != nil || numbered == 0 {
		return out, err
	}
	fresh, err := scanRows(tx.Stmt(st[1]).Query(assigned, numbered))
	if err != nil {
		return nil, err
	}
	if int64(len(fresh)) != numbered {
		return nil, fmt.Errorf("outbox: numbered %d items, read back %d", numbered, len(fresh))
	}
	if _, err := tx.Stmt(st[3]).Exec(assigned + numbered); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return append(out, fresh...), nil
}

func scanRows(rs *sql.Rows, err error) ([]Row, error) {
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

// ErrNotSent is a receipt for a sequence number this outbox never sent:
// it is not believed.
var ErrNotSent = errors.New("outbox: a receipt for a sequence number never sent")

// Ack records that the hub has stored every item up to seq: events and
// removals go, a pod's status stays until a newer one replaces it. A
// receipt beyond what was sent is refused with ErrNotSent, so the outbox
// never records a cursor it did not reach.
func (s *Store) Ack(seq int64) error {
	st, err := s.prepare(qMeta, qSettle, qAcked)
	if err != nil {
		return err
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var acked, assigned int64
	if err := tx.Stmt(st[0]).QueryRow().Scan(&acked, &assigned); err != nil {
		return err
	}
	if seq > assigned {
		return fmt.Errorf("%w: %d, sent up to %d", ErrNotSent, seq, assigned)
	}
	if seq <= acked {
		return nil
	}
	// Only the rows this receipt covers: those at or below the previous
	// one were settled by it (and a pod's status replaced since went in
	// Add), so the pods' retained statuses are not scanned at every
	// receipt.
	if _, err := tx.Stmt(st[1]).Exec(acked, seq, KindEvent); err != nil {
		return err
	}
	if _, err := tx.Stmt(st[2]).Exec(seq); err != nil {
		return err
	}
	return tx.Commit()
}

// NewEpoch starts a new sequence: every item kept, a pod's stored status
// included, is unsent again and will be numbered from 1. The device does
// this when the hub's cursor for its epoch cannot be trusted (it is ahead
// of what was sent, or behind what was stored).
func (s *Store) NewEpoch() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	epoch := newEpoch()
	tx, err := s.db.Begin()
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`UPDATE outbox SET wseq = NULL`); err != nil {
		return "", err
	}
	if _, err := tx.Exec(`UPDATE outbox_meta SET epoch = ?, acked = 0, assigned = 0 WHERE id = 1`, epoch); err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", err
	}
	s.epoch = epoch
	return epoch, nil
}

// Progress reads the hub's receipt cursor and the highest sequence
// number sent, without counting the rows as Stats does.
func (s *Store) Progress() (acked, assigned int64, err error) {
	err = s.db.QueryRow(`SELECT acked, assigned FROM outbox_meta WHERE id = 1`).Scan(&acked, &assigned)
	return acked, assigned, err
}

// Stats reads the outbox's size and counters.
func (s *Store) Stats() (Stats, error) {
	var st Stats
	err := s.db.QueryRow(`SELECT
		(SELECT COUNT(*) FROM outbox WHERE wseq IS NULL OR wseq > m.acked),
		(SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM outbox WHERE wseq IS NULL OR wseq > m.acked),
		(SELECT COUNT(*) FROM outbox WHERE wseq <= m.acked),
		dropped, acked, assigned
		FROM outbox_meta m WHERE id = 1`).Scan(&st.Rows, &st.Bytes, &st.Retained, &st.Dropped, &st.Acked, &st.Assigned)
	return st, err
}

// Mirrored returns the newest status of each pod the outbox holds, sent
// or not, by key: what the hub has or will have of each pod once the
// outbox is drained. Pods whose newest item is their removal are left
// out. A restarted device compares its pods with these, so that a pod
// gone while the device was down is removed at the hub too.
func (s *Store) Mirrored() (map[string][]byte, error) {
	rs, err := s.db.Query(`SELECT key, payload FROM outbox o WHERE kind = ? AND LENGTH(payload) > 0
		AND seq = (SELECT MAX(seq) FROM outbox WHERE key = o.key AND kind = o.kind)`, KindPod)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	defer rs.Close()
	out := map[string][]byte{}
	for rs.Next() {
		var key string
		var payload []byte
		if err := rs.Scan(&key, &payload); err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
		out[key] = payload
	}
	return out, rs.Err()
}
