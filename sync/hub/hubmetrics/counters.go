package hubmetrics

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Counters are what the device link counts as it goes (it is the link's
// devicelink.Observer): made before the hub, given to the link's Config
// (Observe) and to this package's Config.
type Counters struct {
	statusItems atomic.Uint64
	heartbeats  atomic.Uint64
	mu          sync.Mutex
	refused     map[string]uint64 // by topic kind: the kinds the link subscribes to
	notOwned    map[string]uint64 // likewise
}

// NewCounters makes counters at zero.
func NewCounters() *Counters {
	return &Counters{refused: map[string]uint64{}, notOwned: map[string]uint64{}}
}

// maxRefusedKinds bounds the kind label's values: the link refuses only
// on the kinds it subscribes to, a handful; a longer list is a bug, not
// a reason for unbounded series.
const maxRefusedKinds = 32

// StatusItemsStored counts n status items stored.
func (c *Counters) StatusItemsStored(n int) {
	if n > 0 {
		c.statusItems.Add(uint64(n))
	}
}

// HeartbeatStored counts one heartbeat stored.
func (c *Counters) HeartbeatStored() { c.heartbeats.Add(1) }

// MessageRefused counts one refused message of a topic's kind.
func (c *Counters) MessageRefused(kind string) { c.count(c.refused, kind) }

// MessageNotOwned counts one message of a topic's kind left to the
// replica owning its device.
func (c *Counters) MessageNotOwned(kind string) { c.count(c.notOwned, kind) }

func (c *Counters) count(byKind map[string]uint64, kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := byKind[kind]; !ok && len(byKind) >= maxRefusedKinds {
		kind = "other"
	}
	byKind[kind]++
}

// refusedByKind is a copy of the refused counts, sorted by kind.
func (c *Counters) refusedByKind() (kinds []string, counts []uint64) {
	return c.byKind(c.refused)
}

// notOwnedByKind is a copy of the not-owned counts, sorted by kind.
func (c *Counters) notOwnedByKind() (kinds []string, counts []uint64) {
	return c.byKind(c.notOwned)
}

func (c *Counters) byKind(m map[string]uint64) (kinds []string, counts []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		counts = append(counts, m[k])
	}
	return kinds, counts
}
