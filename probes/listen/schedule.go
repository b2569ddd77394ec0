package listen

import "time"

// The sock_diag path's dump schedule. A dump of one pod's listeners costs
// about 130 µs of the dump itself (BenchmarkRescan, a pod in its own network namespace, on
// a busy 2-core machine), so dumping 100 idle pods once a second would
// cost 1.3 % of a core, six times the budget. Listeners mostly open soon after a container starts:
// dumps follow a start closely, backing off, and then come slowly.
const (
	// DumpFirst is the first interval after a container starts; it
	// doubles (the interval is the time since the start) up to DumpBurst.
	DumpFirst = 10 * time.Millisecond
	// DumpBurst is the longest interval while a start is recent.
	DumpBurst = time.Second
	// DumpBurstFor is how long after a start dumps stay frequent.
	DumpBurstFor = 30 * time.Second
	// DumpSlow is the interval otherwise: it bounds how late a listener
	// opened long after its container started, or closed, is seen (the
	// probes' own periods still run meanwhile). Slow dumps fall on a
	// shared grid of DumpSlow (wall clock), so every idle pod is dumped in
	// one sweep: it wakes the daemon once, and one dump of each network
	// namespace answers for all the pods in it (Watcher.Rescan of many).
	DumpSlow = 10 * time.Second
)

// NextDump says when a cgroup's listeners are next due to be dumped,
// given when its latest container started (or it was first watched) and
// when it was last dumped. A dump not yet made since the start is due at
// the start.
func NextDump(started, last time.Time) time.Time {
	since := last.Sub(started)
	switch {
	case since < 0:
		return started
	case since >= DumpBurstFor:
		return last.Add(DumpSlow).Truncate(DumpSlow) // on the grid, at most DumpSlow on

	}
	return last.Add(min(max(since, DumpFirst), DumpBurst))
}
