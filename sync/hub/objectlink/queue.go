package objectlink

import (
	"sort"
	"sync"

	"github.com/podvisor/podvisor/sync/protocol"
)

// requestQueue holds the devices' requests until the answerer takes
// them: one entry per device, its refs merged (by kind/namespace/name,
// the newest version asked for), at most protocol.MaxObjectEntries of
// them. It is bounded by the devices that can reach the hub, each by
// what an index can list, and it never drops a request.
type requestQueue struct {
	mu    sync.Mutex
	order []string
	refs  map[string]map[string]protocol.ObjectEntry
	wake  chan struct{}
}

func newRequestQueue() *requestQueue {
	return &requestQueue{refs: map[string]map[string]protocol.ObjectEntry{}, wake: make(chan struct{}, 1)}
}

// add queues a device's refs behind the devices already waiting, or
// merges them into its waiting request.
func (q *requestQueue) add(dev string, refs []protocol.ObjectEntry) {
	q.mu.Lock()
	m := q.refs[dev]
	if m == nil {
		m = make(map[string]protocol.ObjectEntry, len(refs))
		q.refs[dev] = m
		q.order = append(q.order, dev)
	}
	for _, r := range refs {
		if _, ok := m[r.Key()]; !ok && len(m) >= protocol.MaxObjectEntries {
			break
		}
		m[r.Key()] = r
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the first waiting device's refs, sorted; ok is false when
// none waits.
func (q *requestQueue) next() (dev string, refs []protocol.ObjectEntry, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return "", nil, false
	}
	dev, q.order = q.order[0], q.order[1:]
	if len(q.order) == 0 {
		q.order = nil // let the backing array go after a burst
	}
	m := q.refs[dev]
	delete(q.refs, dev)
	refs = make([]protocol.ObjectEntry, 0, len(m))
	for _, r := range m {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Key() < refs[j].Key() })
	return dev, refs, true
}

// len is how many devices wait.
func (q *requestQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}
