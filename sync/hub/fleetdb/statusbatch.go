package fleetdb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// A status batch of several pods is stored in a few statements, not one
// or two per item: the stored mirrors of the batch's pods are read at
// once, the items applied to them here, in order, by the rules of
// storeMirror, and the outcome written in multi-row statements (deletes,
// one upsert of the new and changed mirrors, the events). On PostgreSQL
// every statement is a round trip, and one per item made storing 100
// statuses cost 9 ms. SQLite keeps one prepared statement per item: it
// has no round trips, and its prepared single-row statements beat
// compiling a multi-row one per batch (measured: make bench-scale,
// docs/scale.md). The transaction holds the device's lock (and the
// store's writer lock, shared: beginDevice), so what is read of the
// device's mirrors stays true until the writes. A batch of fewer pods
// keeps the one statement per item too, which needs no read first.

// batchedFrom is the count of pods' items (statuses and removals) from
// which a batch is stored in multi-row statements on PostgreSQL.
var batchedFrom = 3

// batchedOnSQLite stores batches in multi-row statements on SQLite too
// (the tests', to compare both ways on both stores).
var batchedOnSQLite = false

// batched tells whether storeItems stores the batch past cursor in
// multi-row statements.
func (f *Fleet) batched(b *protocol.StatusBatch, cursor int64) bool {
	return (f.dialect == sqldb.Postgres || batchedOnSQLite) && podItems(b, cursor) >= batchedFrom
}

// rowsPerStatement bounds a multi-row statement's rows (11 arguments a
// mirror row: far below SQLite's and PostgreSQL's argument limits).
const rowsPerStatement = 200

// mirrorRow is a stored mirror's columns.
type mirrorRow struct {
	seq                int64
	pod                []byte
	ready              bool
	readySince         int64
	phase, failure     string
	restarts           int64
	summaryAt          int64
	scheduled          bool
	written, recreated bool // changed by the batch; deleted by it first (a new row)
}

// qTouchCursor is touch, qCursor and qCountMirrors in one statement,
// PostgreSQL's: two round trips less for every status batch. SQLite
// runs no data-modifying statement in a WITH.
const qTouchCursor = `WITH t AS (UPDATE devices SET last_seen = CASE WHEN last_seen > ?1 THEN last_seen ELSE ?1 END WHERE id = ?2 RETURNING id)
	SELECT (SELECT COUNT(*) FROM t), COALESCE(c.epoch, ''), COALESCE(c.seq, 0), c.device IS NOT NULL,
		(SELECT COUNT(*) FROM mirrors WHERE device = ?2)
	FROM (SELECT 1) AS one LEFT JOIN cursors c ON c.device = ?2`

// touchCursor touches the device and reads its cursor (sql.ErrNoRows:
// none yet), in one round trip on PostgreSQL, which also counts the
// device's mirrors there (-1 on SQLite: StoreStatus keeps them).
func (f *Fleet) touchCursor(tx *sql.Tx, device string, at time.Time, epoch *string, seq *int64, mirrors *int) error {
	*mirrors = -1
	if f.dialect != sqldb.Postgres {
		if err := f.touch(tx, device, at); err != nil {
			return err
		}
		return f.stmts.QueryRow(tx, qCursor, []any{device}, epoch, seq)
	}
	var touched int64
	var has bool
	if err := tx.QueryRow(qTouchCursor, at.UnixMilli(), device).Scan(&touched, epoch, seq, &has, mirrors); err != nil {
		return err
	}
	switch {
	case touched == 0:
		return fmt.Errorf("device %q: %w", device, ErrUnknownDevice)
	case !has:
		return sql.ErrNoRows
	}
	return nil
}

// podItems counts a batch's items past the cursor that are pods'.
func podItems(b *protocol.StatusBatch, cursor int64) int {
	n := 0
	for _, it := range b.Items {
		if it.Seq > cursor && it.Event == nil {
			n++
		}
	}
	return n
}

// storeItemsBatched is storeItems in multi-row statements.
func (f *Fleet) storeItemsBatched(tx *sql.Tx, b *protocol.StatusBatch, cursor int64, mirrors int, at time.Time) (_ int64, applied, events, _ int, changed bool, err error) {
	// The stored mirrors of the batch's pods; none when the device has
	// none (its count is exact: counted or kept under the device's lock
	// by the mirrors' only writer, StoreStatus).
	var keys []string
	seen := map[string]bool{}
	for _, it := range b.Items {
		if it.Seq > cursor && it.Event == nil && !seen[it.Key] {
			seen[it.Key] = true
			keys = append(keys, it.Key)
		}
	}
	stored := map[string]*mirrorRow{}
	if mirrors > 0 {
		if stored, err = f.readMirrors(tx, b.Device, keys); err != nil {
			return 0, 0, 0, 0, false, err
		}
	}
	// now is each pod's mirror as the items leave it (nil: none).
	now := map[string]*mirrorRow{}
	for k, m := range stored {
		cp := *m
		now[k] = &cp
	}
	deleted := map[string]bool{} // stored mirrors a removal deleted
	ms := at.UnixMilli()
	var eventRows [][]any
	for _, it := range b.Items {
		if it.Seq <= cursor {
			continue
		}
		cursor = it.Seq
		applied++
		switch {
		case it.Event != nil:
			ev, _ := json.Marshal(it.Event)
			eventRows = append(eventRows, []any{b.Device, it.Seq, it.Key, ev, ms})
			events++
		case it.Pod == nil:
			if now[it.Key] != nil {
				now[it.Key] = nil
				mirrors--
				changed = true
				if stored[it.Key] != nil {
					deleted[it.Key] = true
				}
			}
		default:
			s := summarize(it.Pod)
			scheduled := it.Pod.Annotations[AnnotationScheduled] == "true"
			pod, _ := json.Marshal(it.Pod)
			m := now[it.Key]
			switch {
			case m == nil:
				if f.retention.Mirrors > 0 && mirrors >= f.retention.Mirrors {
					continue // more pods than any device runs: made up
				}
				m = &mirrorRow{summaryAt: ms, scheduled: scheduled, written: true, recreated: deleted[it.Key]}
				if s.ready {
					m.readySince = ms
				}
				now[it.Key] = m
				mirrors++
				changed = changed || scheduled // a new mirror's summary is new
			case m.seq >= it.Seq:
				continue // the hub has a newer status
			case m.ready != s.ready || m.phase != s.phase || m.failure != s.failure:
				m.summaryAt = ms
				switch {
				case !s.ready:
					m.readySince = 0
				case !m.ready:
					m.readySince = ms
				}
				changed = changed || scheduled
			}
			m.seq, m.pod, m.ready, m.phase, m.restarts, m.failure, m.written = it.Seq, pod, s.ready, s.phase, s.restarts, s.failure, true
		}
	}
	var gone []string
	var upserts [][]any
	for _, k := range keys {
		m := now[k]
		if deleted[k] && (m == nil || m.recreated) {
			gone = append(gone, k)
		}
		if m != nil && m.written {
			upserts = append(upserts, []any{b.Device, k, m.seq, m.pod, boolInt(m.ready), m.readySince, m.phase, m.restarts, m.failure, m.summaryAt, boolInt(m.scheduled)})
		}
	}
	if err := f.deleteMirrors(tx, b.Device, gone); err != nil {
		return 0, 0, 0, 0, false, err
	}
	if err := execRows(tx, `INSERT INTO mirrors (device, key, seq, pod, ready, ready_since, phase, restarts, failure, summary_at, scheduled) VALUES `,
		` ON CONFLICT(device, key) DO UPDATE SET seq = excluded.seq, pod = excluded.pod, ready = excluded.ready,
		ready_since = excluded.ready_since, phase = excluded.phase, restarts = excluded.restarts, failure = excluded.failure,
		summary_at = excluded.summary_at`, upserts); err != nil {
		return 0, 0, 0, 0, false, err
	}
	if err := execRows(tx, `INSERT INTO events (device, seq, key, event, at) VALUES `, ``, eventRows); err != nil {
		return 0, 0, 0, 0, false, err
	}
	return cursor, applied, events, mirrors, changed, nil
}

// readMirrors reads device's stored mirrors of keys.
func (f *Fleet) readMirrors(tx *sql.Tx, device string, keys []string) (map[string]*mirrorRow, error) {
	out := map[string]*mirrorRow{}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), rowsPerStatement)]
		keys = keys[len(chunk):]
		args := []any{device}
		for _, k := range chunk {
			args = append(args, k)
		}
		rows, err := tx.Query(`SELECT key, seq, ready, ready_since, phase, restarts, failure, summary_at, scheduled FROM mirrors
			WHERE device = ? AND key IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var key string
			var ready, scheduled int64
			m := &mirrorRow{}
			if err := rows.Scan(&key, &m.seq, &ready, &m.readySince, &m.phase, &m.restarts, &m.failure, &m.summaryAt, &scheduled); err != nil {
				rows.Close()
				return nil, err
			}
			m.ready, m.scheduled = ready != 0, scheduled != 0
			out[key] = m
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deleteMirrors deletes device's mirrors of keys.
func (f *Fleet) deleteMirrors(tx *sql.Tx, device string, keys []string) error {
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), rowsPerStatement)]
		keys = keys[len(chunk):]
		args := []any{device}
		for _, k := range chunk {
			args = append(args, k)
		}
		if _, err := tx.Exec(`DELETE FROM mirrors WHERE device = ? AND key IN (`+placeholders(len(chunk))+`)`, args...); err != nil {
			return err
		}
	}
	return nil
}

// execRows runs head VALUES (…), (…) tail over rows, rowsPerStatement
// rows a statement.
func execRows(tx *sql.Tx, head, tail string, rows [][]any) error {
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), rowsPerStatement)]
		rows = rows[len(chunk):]
		var q strings.Builder
		q.WriteString(head)
		var args []any
		for i, r := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(" + placeholders(len(r)) + ")")
			args = append(args, r...)
		}
		q.WriteString(tail)
		if _, err := tx.Exec(q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// placeholders is n question marks, comma separated (PostgreSQL's
// connection rewrites them to $1, $2, …).
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
