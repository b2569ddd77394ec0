package store

import (
	"database/sql"
	"strings"
)

// addChunk is how many items one pair of Add's statements carries: a
// statement per item was most of Add's cost (each Exec goes through
// database/sql and the driver), and a chunk's 3 bound values per item
// stay far below SQLite's limit on variables. A shorter chunk has
// statements of its own length, each prepared once: at most 2 × addChunk
// statements are kept.
const addChunk = 64

// newestPerPod keeps, of the statuses of one pod in items, only the
// last, where it stands: what adding them one by one leaves (each
// replaced the one before while unsent). Events are all kept, in order.
func newestPerPod(items []Item) []Item {
	last := map[string]int{}
	for i, it := range items {
		if it.Kind == KindPod {
			last[it.Key] = i
		}
	}
	if len(last) == len(podKeys(items)) {
		return items // no pod twice: nothing to drop
	}
	out := make([]Item, 0, len(items))
	for i, it := range items {
		if it.Kind != KindPod || last[it.Key] == i {
			out = append(out, it)
		}
	}
	return out
}

// podKeys are the keys of the pods' items.
func podKeys(items []Item) []any {
	var keys []any
	for _, it := range items {
		if it.Kind == KindPod {
			keys = append(keys, it.Key)
		}
	}
	return keys
}

// addStep is one chunk of an Add: its pods' older rows go, then its
// items are appended. A pod is in one chunk at most (newestPerPod), so
// no row an Add appends is deleted by it.
type addStep struct {
	items []Item
	pods  []any // the pods' keys
}

func planAdd(items []Item) []addStep {
	var steps []addStep
	for len(items) > 0 {
		n := min(addChunk, len(items))
		steps = append(steps, addStep{items: items[:n], pods: podKeys(items[:n])})
		items = items[n:]
	}
	return steps
}

// queries are the step's statements: the replacement (if it has pods),
// then the insert.
func (a addStep) queries() []string {
	insert := `INSERT INTO outbox (key, kind, payload) VALUES (?, ?, ?)` + strings.Repeat(`, (?, ?, ?)`, len(a.items)-1)
	if len(a.pods) == 0 {
		return []string{insert}
	}
	// The older rows that may go: not on their way to the hub (unsent,
	// or settled by its receipt).
	replace := `DELETE FROM outbox WHERE kind = ? AND key IN (?` + strings.Repeat(`, ?`, len(a.pods)-1) + `)
		AND (wseq IS NULL OR wseq <= (SELECT acked FROM outbox_meta WHERE id = 1))`
	return []string{replace, insert}
}

// exec runs the step in tx with its statements, prepared (queries' order).
func (a addStep) exec(tx *sql.Tx, st []*sql.Stmt) error {
	if len(a.pods) > 0 {
		if _, err := tx.Stmt(st[0]).Exec(append([]any{KindPod}, a.pods...)...); err != nil {
			return err
		}
		st = st[1:]
	}
	values := make([]any, 0, 3*len(a.items))
	for _, it := range a.items {
		payload := it.Payload
		if payload == nil {
			payload = []byte{} // a pod gone from the device
		}
		values = append(values, it.Key, it.Kind, payload)
	}
	_, err := tx.Stmt(st[0]).Exec(values...)
	return err
}
