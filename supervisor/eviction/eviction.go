// Package eviction decides node-pressure evictions as the kubelet does:
// thresholds on eviction signals (hard, and soft with grace periods),
// minimum reclaim, node conditions with a transition period, and the
// ranking of pods to evict. It is pure: the caller observes the signals
// (from PSI triggers, memory events and a slow safety-net check) and acts
// on the decision.
package eviction

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Signal is an eviction signal.
type Signal string

// Signals, named as in the kubelet's configuration.
const (
	MemoryAvailable   Signal = "memory.available"
	NodeFsAvailable   Signal = "nodefs.available"
	NodeFsInodesFree  Signal = "nodefs.inodesFree"
	ImageFsAvailable  Signal = "imagefs.available"
	ImageFsInodesFree Signal = "imagefs.inodesFree"
	PIDAvailable      Signal = "pid.available"
)

var signals = map[Signal]v1.NodeConditionType{
	MemoryAvailable: v1.NodeMemoryPressure,
	NodeFsAvailable: v1.NodeDiskPressure, NodeFsInodesFree: v1.NodeDiskPressure,
	ImageFsAvailable: v1.NodeDiskPressure, ImageFsInodesFree: v1.NodeDiskPressure,
	PIDAvailable: v1.NodePIDPressure,
}

// HardGracePeriod is the grace a hard eviction gives a pod: the kubelet's
// immediateEvictionGracePeriodSeconds (the docs say 0; the code says 1).
const HardGracePeriod = time.Second

// Threshold is one eviction threshold.
type Threshold struct {
	Signal Signal
	// Quantity or Percentage (of capacity) is the level below which the
	// threshold is met.
	Quantity   int64
	Percentage float64
	// Soft thresholds act only after being met for GracePeriod.
	Soft        bool
	GracePeriod time.Duration
	// MinReclaim is how far past the threshold an eviction must bring the
	// signal before the threshold counts as resolved.
	MinReclaim    int64
	MinReclaimPct float64
}

func (t Threshold) String() string {
	op := "<"
	v := strconv.FormatInt(t.Quantity, 10)
	if t.Percentage > 0 {
		v = strconv.FormatFloat(t.Percentage*100, 'f', -1, 64) + "%"
	}
	kind := "hard"
	if t.Soft {
		kind = "soft"
	}
	return fmt.Sprintf("%s %s%s%s", kind, t.Signal, op, v)
}

// level is the threshold in the signal's unit for a given capacity.
func (t Threshold) level(capacity int64) int64 {
	if t.Percentage > 0 {
		return int64(t.Percentage * float64(capacity))
	}
	return t.Quantity
}

func (t Threshold) reclaim(capacity int64) int64 {
	if t.MinReclaimPct > 0 {
		return int64(t.MinReclaimPct * float64(capacity))
	}
	return t.MinReclaim
}

// DefaultHard is the kubelet's Linux default: memory.available<100Mi,
// nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%.
func DefaultHard() map[string]string {
	return map[string]string{
		string(MemoryAvailable): "100Mi", string(NodeFsAvailable): "10%",
		string(NodeFsInodesFree): "5%", string(ImageFsAvailable): "15%",
	}
}

// Parse builds thresholds from kubelet-style maps (signal → "100Mi" or
// "10%"). Every soft threshold needs a grace period, as in the kubelet.
func Parse(hard, soft, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	var out []Threshold
	add := func(kind string, m map[string]string, isSoft bool) error {
		for sig, val := range m {
			s := Signal(sig)
			if _, ok := signals[s]; !ok {
				return fmt.Errorf("eviction%s: unknown signal %q", kind, sig)
			}
			t := Threshold{Signal: s, Soft: isSoft}
			var err error
			if t.Quantity, t.Percentage, err = parseValue(val); err != nil {
				return fmt.Errorf("eviction%s[%s]: %w", kind, sig, err)
			}
			if isSoft {
				g, ok := softGrace[sig]
				if !ok {
					return fmt.Errorf("evictionSoft[%s]: needs a grace period in evictionSoftGracePeriod", sig)
				}
				if t.GracePeriod, err = time.ParseDuration(g); err != nil || t.GracePeriod < 0 {
					return fmt.Errorf("evictionSoftGracePeriod[%s]: %q is not a duration", sig, g)
				}
			}
			if r, ok := minReclaim[sig]; ok {
				if t.MinReclaim, t.MinReclaimPct, err = parseValue(r); err != nil {
					return fmt.Errorf("evictionMinimumReclaim[%s]: %w", sig, err)
				}
			}
			out = append(out, t)
		}
		return nil
	}
	if err := add("Hard", hard, false); err != nil {
		return nil, err
	}
	if err := add("Soft", soft, true); err != nil {
		return nil, err
	}
	for sig := range softGrace {
		if _, ok := soft[sig]; !ok {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: no soft threshold for this signal", sig)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func parseValue(v string) (int64, float64, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 || f > 100 {
			return 0, 0, fmt.Errorf("%q is not a percentage in (0, 100]", v)
		}
		return 0, f / 100, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return 0, 0, fmt.Errorf("%q is not a quantity", v)
	}
	return q.Value(), 0, nil
}

// Observation is one signal's current value.
type Observation struct {
	Available int64
	Capacity  int64
}

// Manager remembers what it needs across observations: when each soft
// threshold was first met, which thresholds are being reclaimed towards
// their minimum, and when each node condition was last true.
type Manager struct {
	Thresholds []Threshold
	// TransitionPeriod holds a pressure condition after its threshold
	// stops being met (evictionPressureTransitionPeriod, default 5m).
	TransitionPeriod time.Duration
	// MaxPodGracePeriod caps soft evictions' grace (0: the pod's own).
	MaxPodGracePeriod time.Duration

	firstMet      map[string]time.Time
	reclaiming    map[string]bool
	conditionSeen map[v1.NodeConditionType]time.Time
}

// Status is the outcome of one synchronization.
type Status struct {
	// Met are the thresholds to act on now (soft ones past their grace).
	Met []Threshold
	// Conditions are the node conditions to report.
	Conditions map[v1.NodeConditionType]bool
	// NextCheck is when a soft grace period or a transition period ends.
	NextCheck time.Time
}

// Synchronize evaluates the observations at now.
func (m *Manager) Synchronize(obs map[Signal]Observation, now time.Time) Status {
	if m.firstMet == nil {
		m.firstMet, m.reclaiming, m.conditionSeen = map[string]time.Time{}, map[string]bool{}, map[v1.NodeConditionType]time.Time{}
	}
	st := Status{Conditions: map[v1.NodeConditionType]bool{}}
	wake := func(t time.Time) {
		if st.NextCheck.IsZero() || t.Before(st.NextCheck) {
			st.NextCheck = t
		}
	}
	for _, t := range m.Thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		key := t.String()
		level := t.level(o.Capacity)
		// Once met, a threshold holds until the signal recovers past its
		// minimum reclaim.
		if m.reclaiming[key] {
			level += t.reclaim(o.Capacity)
		}
		if o.Available >= level {
			delete(m.firstMet, key)
			delete(m.reclaiming, key)
			continue
		}
		m.conditionSeen[signals[t.Signal]] = now
		if _, ok := m.firstMet[key]; !ok {
			m.firstMet[key] = now
		}
		if t.Soft && now.Sub(m.firstMet[key]) < t.GracePeriod {
			wake(m.firstMet[key].Add(t.GracePeriod))
			continue
		}
		m.reclaiming[key] = true
		st.Met = append(st.Met, t)
	}
	for cond, seen := range m.conditionSeen {
		if until := seen.Add(m.TransitionPeriod); now.Before(until) || seen.Equal(now) {
			st.Conditions[cond] = true
			wake(until)
		} else {
			delete(m.conditionSeen, cond)
		}
	}
	return st
}

// PodStats is what ranking needs to know about a running pod.
type PodStats struct {
	UID         types.UID
	Name        string
	Priority    int32
	Critical    bool
	GracePeriod time.Duration // the pod's terminationGracePeriodSeconds
	MemoryUsage int64         // working set
	MemoryReq   int64
	DiskUsage   int64
	DiskReq     int64 // ephemeral-storage request
	Processes   int64
}

// Victim is the pod to evict and how.
type Victim struct {
	Pod PodStats
	// Signal is the threshold's signal the pod is evicted for.
	Signal      Signal
	GracePeriod time.Duration
	Message     string
}

// Select returns at most one pod to evict for the first met threshold, as
// the kubelet evicts at most one pod per round. Critical pods are never
// chosen. Disk signals first call for node-level reclaim, which the caller
// performs before asking again (reclaimNodeLevel true).
func (m *Manager) Select(met []Threshold, pods []PodStats, reclaimedNodeLevel bool) (v *Victim, reclaimNodeLevel bool) {
	if len(met) == 0 {
		return nil, false
	}
	t := met[0]
	for _, x := range met { // hard thresholds act before soft ones
		if !x.Soft {
			t = x
			break
		}
	}
	if isDisk(t.Signal) && !reclaimedNodeLevel {
		return nil, true
	}
	ranked := Rank(t.Signal, pods)
	for _, p := range ranked {
		if p.Critical {
			continue
		}
		grace := HardGracePeriod
		if t.Soft {
			grace = p.GracePeriod
			if m.MaxPodGracePeriod > 0 && m.MaxPodGracePeriod < grace {
				grace = m.MaxPodGracePeriod
			}
		}
		return &Victim{Pod: p, Signal: t.Signal, GracePeriod: grace, Message: message(t, p)}, false
	}
	return nil, false
}

func isDisk(s Signal) bool { return signals[s] == v1.NodeDiskPressure }

func message(t Threshold, p PodStats) string {
	res := map[v1.NodeConditionType]string{v1.NodeMemoryPressure: "memory", v1.NodeDiskPressure: "ephemeral-storage", v1.NodePIDPressure: "pids"}[signals[t.Signal]]
	msg := fmt.Sprintf("The node was low on resource: %s. Threshold quantity: %s.", res, t)
	switch signals[t.Signal] {
	case v1.NodeMemoryPressure:
		msg += fmt.Sprintf(" Pod %s was using %d bytes, request is %d.", p.Name, p.MemoryUsage, p.MemoryReq)
	case v1.NodePIDPressure:
		msg += fmt.Sprintf(" Pod %s was running %d processes.", p.Name, p.Processes)
	default:
		msg += fmt.Sprintf(" Pod %s was using %d bytes, request is %d.", p.Name, p.DiskUsage, p.DiskReq)
	}
	return msg
}

// Rank orders pods for eviction under a signal as the kubelet does:
// memory and disk by whether usage exceeds the request, then priority
// (lowest first), then usage above the request (most first); pids by
// priority, then process count.
func Rank(s Signal, pods []PodStats) []PodStats {
	out := append([]PodStats(nil), pods...)
	usage := func(p PodStats) (int64, int64) { return p.MemoryUsage, p.MemoryReq }
	if isDisk(s) {
		usage = func(p PodStats) (int64, int64) { return p.DiskUsage, p.DiskReq }
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if s == PIDAvailable {
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			return a.Processes > b.Processes
		}
		au, ar := usage(a)
		bu, br := usage(b)
		if ea, eb := au > ar, bu > br; ea != eb {
			return ea
		}
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		return au-ar > bu-br
	})
	return out
}

// ImageGCBytes is how much the image garbage collector frees, as the
// kubelet decides it: nothing while the image file system's usage is at
// or below high percent, else enough to bring it down to low percent.
func ImageGCBytes(fs Observation, high, low int) int64 {
	if fs.Capacity <= 0 || high <= 0 || high > 100 || low > high {
		return 0
	}
	used := fs.Capacity - fs.Available
	if used*100 <= int64(high)*fs.Capacity {
		return 0
	}
	return used - int64(low)*fs.Capacity/100
}
