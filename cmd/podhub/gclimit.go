package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// podhub's collector: Go's default pacing (GOGC 100, or the GOGC
// variable) under a soft memory limit (debug.SetMemoryLimit) that bounds
// the garbage an idle fleet leaves resident. A fixed GOGC 10 kept about
// 3 KiB less per idle device but collected at every 10% of growth, so
// an apply to a fleet or a burst of reports spent most of podhub's CPU in
// the collector (docs/measurements.md).
//
// memoryLimit (podhub.yaml) or --memory-limit:
//   - auto (the default): autoBase plus autoPerDevice for each client of
//     the embedded broker, and never below 9/8 of what is live (so a
//     fleet heavier than the budget collects as often as GOGC 12 would,
//     and the collector never runs stuck at the limit), plus
//     burstHeadroom while podhub allocates fast (a burst); recomputed
//     every autoEvery; GOMEMLIMIT, when set, is left in force;
//   - a size (512Mi, 1G): that limit, fixed;
//   - off: no limit, the collector paced by GOGC alone.
const (
	autoBase      = 16 << 20
	autoPerDevice = 24 << 10
	autoEvery     = 100 * time.Millisecond
	// A burst: over burstAlloc allocated in one autoEvery lends the
	// limit burstHeadroom until burstHold after the last such period.
	burstAlloc    = 1 << 20
	burstHeadroom = 24 << 20
	burstHold     = 2 * time.Second
)

// memoryLimit is a parsed memoryLimit setting: auto, or bytes (0: off).
type memoryLimit struct {
	auto  bool
	bytes int64
}

func parseMemoryLimit(s string) (memoryLimit, error) {
	switch strings.TrimSpace(s) {
	case "", "auto":
		return memoryLimit{auto: true}, nil
	case "off", "0":
		return memoryLimit{}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 || q.Value() < 16<<20 {
		return memoryLimit{}, fmt.Errorf("memory limit %q: want auto, off or a size of at least 16Mi (512Mi, 1G)", s)
	}
	return memoryLimit{bytes: q.Value()}, nil
}

// autoLimit is the auto limit for clients connected devices with live
// bytes of memory in use after the last collection.
func autoLimit(clients int, live uint64) int64 {
	return max(int64(autoBase)+int64(clients)*autoPerDevice, int64(live/8*9))
}

// memStats reads the memory the runtime holds that the last collection
// could not free (live heap, the unused space of its spans, stacks and
// the runtime's own) and the bytes allocated since start.
func memStats() (live, allocated uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	var v [7]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	// Unused is the free space inside the heap's spans in use: no
	// collection returns it, so the limit must stay above it too.
	nonHeap := v[1] - min(v[1], v[2]+v[3]+v[4]+v[5])
	return v[0] + v[3] + nonHeap, v[6]
}

// burst lends the auto limit burstHeadroom while podhub allocates
// (an apply to the fleet, a storm of reports): more than burstAlloc in
// one autoEvery starts it, and it ends burstHold after the last such
// period, when the scavenger gives the memory back. An idle fleet
// allocates far less (0.07 MiB/s with 3,000 devices).
type burst struct {
	lastAlloc uint64
	until     time.Time
}

func (b *burst) headroom(allocated uint64, now time.Time) int64 {
	if allocated-b.lastAlloc >= burstAlloc {
		b.until = now.Add(burstHold)
	}
	b.lastAlloc = allocated
	if now.Before(b.until) {
		return burstHeadroom
	}
	return 0
}

// applyMemoryLimit sets the limit; with auto it follows clients (the
// embedded broker's connected count; nil: none) until stop is closed.
func applyMemoryLimit(l memoryLimit, clients func() int, stop <-chan struct{}) {
	if l.auto && os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if !l.auto {
		if l.bytes > 0 {
			debug.SetMemoryLimit(l.bytes)
		}
		return
	}
	var b burst
	var lent int64
	set := func() {
		n := 0
		if clients != nil {
			n = clients()
		}
		live, allocated := memStats()
		h := b.headroom(allocated, time.Now())
		if lent > 0 && h == 0 {
			// The burst is over: its free pages go back to the kernel at
			// once, or the collector would run without end until the
			// scavenger got under the lower limit.
			debug.FreeOSMemory()
			live, _ = memStats()
		}
		lent = h
		debug.SetMemoryLimit(autoLimit(n, live) + h)
	}
	set()
	go func() {
		t := time.NewTicker(autoEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				debug.SetMemoryLimit(math.MaxInt64)
				return
			case <-t.C:
				set()
			}
		}
	}()
}
