package pressure

import "strings"

// Wake says what made the daemon look at the signals: one bit per source,
// several when they came before the daemon looked. It tells an eviction
// the kernel noticed at once from one the safety net found late.
type Wake uint32

const (
	// WakeThreshold: the v1 memory cgroup's usage crossed the armed level
	// (cgroup.event_control eventfd).
	WakeThreshold Wake = 1 << iota
	// WakePSI: a PSI trigger fired.
	WakePSI
	// WakeMemoryEvents: a watched file changed (a cgroup v2
	// memory.events: a limit hit or an OOM kill).
	WakeMemoryEvents
	// WakePeriodic: the slow safety-net check.
	WakePeriodic
	// WakeRecheck: the daemon's own timer (pressure lasting, a soft grace
	// or transition period ending).
	WakeRecheck
	// WakeStart: the daemon's first look.
	WakeStart
)

var wakeNames = []string{
	"memory threshold event", "PSI trigger", "memory.events change",
	"periodic check", "pressure recheck", "start-up",
}

// Kernel says whether a kernel notification is among the causes.
func (w Wake) Kernel() bool { return w&(WakeThreshold|WakePSI|WakeMemoryEvents) != 0 }

// String names the causes, the kernel's first, joined by " and ".
func (w Wake) String() string {
	var names []string
	for i, name := range wakeNames {
		if w&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, " and ")
}
