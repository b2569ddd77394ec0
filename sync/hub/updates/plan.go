// Package updates rolls releases (podvisor's own binaries, or an
// operating-system bundle) out to devices in waves: Plan is the pure
// controller (an update's spec, its devices and the clock in; the
// devices to order now and the status out), Driver runs it over the
// fleet database and publishes the orders.
package updates

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Spec is an update as the operator asked for it (podhub update).
type Spec struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`    // protocol.ReleaseAgent or ReleaseFirmware
	Release string `json:"release"` // the release's name: podvisor, or the bundle's
	Version string `json:"version"`
	// Device or Selector chose the targets, fixed when the update was
	// made: a device labelled later joins the next update, not this one.
	Device   string            `json:"device,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Targets  []string          `json:"targets"`
	// MaxUnavailable bounds the devices updating at once: "N" or "N%" of
	// the targets (rounded down, at least 1). Default DefaultMaxUnavailable.
	MaxUnavailable string `json:"maxUnavailable"`
	// FailureThreshold is the share of the devices with a verdict that
	// may fail before the update halts, "N%". Default
	// DefaultFailureThreshold.
	FailureThreshold string    `json:"failureThreshold"`
	AllowDowngrade   bool      `json:"allowDowngrade,omitempty"`
	Paused           bool      `json:"paused,omitempty"`
	Aborted          bool      `json:"aborted,omitempty"`
	Created          time.Time `json:"created"`
}

// Defaults of an update.
const (
	DefaultMaxUnavailable = "10%"
	// DefaultFailureThreshold: a release that fails on more than one
	// device in ten is not bad luck (a full disk, a flaky link) but a
	// fault of the release (a wrong build, a missing dependency, a daemon
	// that cannot adopt its pods), and that shows within the first wave;
	// one device in ten failing alone does not stop the fleet. Judged
	// only once a wave's worth of devices has a verdict, so the first
	// failure of a large fleet does not halt it by itself.
	DefaultFailureThreshold = "10%"
)

// Phases of an update.
const (
	Progressing = "Progressing"
	Paused      = "Paused"
	Halted      = "Halted"
	Complete    = "Complete"
	Aborted     = "Aborted"
)

// States of a device within an update.
const (
	StateWaiting = "Waiting" // not ordered yet
	StateOffline = "Offline" // not ordered: not reachable (or its architecture not reported yet)
	StateOrdered = "Ordered" // ordered, no report on the order yet
	StateDone    = "Done"
	StateFailed  = "Failed"
	// Otherwise the device's reported phase (Downloading, Verifying...).
)

// Status is an update's progress as its controller last computed it.
type Status struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// Counts over the targets: in progress is ordered and not done.
	Targets    int `json:"targets"`
	Done       int `json:"done"`
	Failed     int `json:"failed"`
	InProgress int `json:"inProgress"`
	Waiting    int `json:"waiting"`
	Offline    int `json:"offline"`
	// MaxUnavailable is the spec's, as a number of devices.
	MaxUnavailable int            `json:"maxUnavailable"`
	Devices        []DeviceStatus `json:"devices"`
	Updated        time.Time      `json:"updated"`
	// Finished is when the update completed, halted or was aborted.
	Finished *time.Time `json:"finished,omitempty"`
}

// DeviceStatus is one device's progress in an update.
type DeviceStatus struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Order   int64  `json:"order,omitempty"`
	Percent int    `json:"percent,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Device is what the controller reads of one target.
type Device struct {
	ID    string
	Ready bool
	// Arch is the device's architecture as its heartbeat says (GOARCH:
	// "arm" for both armv6 and armv7); "" before its first heartbeat.
	Arch string
	// Running is the version it runs: the agent's from its heartbeat, or
	// the booted bundle's for a firmware update.
	Running string
	// Order is this update's order to the device (0: not ordered).
	Order int64
	// State is the device's newest report, on whatever order.
	State *protocol.UpdateState
}

// Release is what the controller reads of the release.
type Release struct {
	Kind    string
	Version string
	Arches  []string // an agent release's architectures
}

// Input is one pass's view.
type Input struct {
	Spec     Spec
	Release  Release
	Devices  []Device // the targets known to the fleet; a missing one waits
	Previous Status
	Now      time.Time
}

// Decision is what a pass does: order these devices now (in order),
// withdraw the orders of those (an abort), and store the status.
type Decision struct {
	Order    []string
	Withdraw []string
	Status   Status
}

// Plan is the update controller: a pure function of its input.
func Plan(in Input) Decision {
	spec := in.Spec
	st := Status{Phase: Progressing, Targets: len(spec.Targets), Updated: in.Now}
	maxUnavailable, err := ParseMaxUnavailable(spec.MaxUnavailable, len(spec.Targets))
	if err != nil {
		maxUnavailable = 1
	}
	threshold, err := ParseFailureThreshold(spec.FailureThreshold)
	if err != nil {
		threshold = 10
	}
	st.MaxUnavailable = maxUnavailable
	byID := make(map[string]Device, len(in.Devices))
	for _, d := range in.Devices {
		byID[d.ID] = d
	}
	var candidates []string // ordered next, in target order
	var failed []DeviceStatus
	verdicts := 0
	var d Decision
	targets := slices.Sorted(slices.Values(spec.Targets))
	for _, id := range targets {
		dev, known := byID[id]
		ds := DeviceStatus{ID: id, Order: dev.Order}
		switch {
		case !known:
			ds.State, ds.Reason = StateOffline, "not in the fleet"
			st.Offline++
		case dev.Order > 0:
			ds = ordered(dev, in.Release.Version)
			switch ds.State {
			case StateDone:
				st.Done++
				verdicts++
			case StateFailed:
				st.Failed++
				verdicts++
				failed = append(failed, ds)
			default:
				st.InProgress++
				if spec.Aborted {
					d.Withdraw = append(d.Withdraw, id)
				}
			}
		case sameVersion(dev.Running, in.Release.Version):
			ds.State, ds.Reason = StateDone, "already runs "+dev.Running
			st.Done++
		default:
			if reason := refused(dev, in.Release, spec.AllowDowngrade); reason != "" {
				ds.State, ds.Reason = StateFailed, reason
				st.Failed++
				verdicts++
				failed = append(failed, ds)
			} else if !dev.Ready || dev.Arch == "" && in.Release.Kind == protocol.ReleaseAgent {
				ds.State = StateOffline
				if dev.Ready {
					ds.Reason = "its architecture is not reported yet"
				}
				st.Offline++
			} else {
				ds.State = StateWaiting
				st.Waiting++
				candidates = append(candidates, id)
			}
		}
		st.Devices = append(st.Devices, ds)
	}
	minimum := min(maxUnavailable, len(spec.Targets))
	switch {
	case spec.Aborted:
		st.Phase, st.Reason = Aborted, "aborted by the operator"
	case in.Previous.Phase == Halted:
		st.Phase, st.Reason = Halted, in.Previous.Reason
	case verdicts >= minimum && verdicts > 0 && len(failed)*100 > threshold*verdicts:
		st.Phase, st.Reason = Halted, haltReason(failed, verdicts, threshold, minimum)
	case st.Done == st.Targets:
		st.Phase = Complete
	case st.Done+st.Failed == st.Targets:
		// Failures under the threshold: every device has its verdict.
		st.Phase, st.Reason = Complete, failedReason(failed)
	case spec.Paused:
		st.Phase = Paused
	}
	if st.Phase == Progressing {
		room := maxUnavailable - st.InProgress
		for _, id := range candidates {
			if room <= 0 {
				break
			}
			d.Order = append(d.Order, id)
			room--
		}
		if n := len(d.Order); n > 0 {
			st.InProgress += n
			st.Waiting -= n
			for i := range st.Devices {
				if slices.Contains(d.Order, st.Devices[i].ID) {
					st.Devices[i].State = StateOrdered
				}
			}
		}
	}
	if st.Phase != Progressing && st.Phase != Paused {
		st.Finished = in.Previous.Finished
		if st.Finished == nil || in.Previous.Phase != st.Phase {
			now := in.Now
			st.Finished = &now
		}
	}
	d.Status = st
	return d
}

// ordered is the state of a device this update ordered: its report on
// that order decides; a commit counts once the device runs the version
// (its heartbeat says so).
func ordered(dev Device, version string) DeviceStatus {
	ds := DeviceStatus{ID: dev.ID, Order: dev.Order, State: StateOrdered}
	s := dev.State
	if s == nil || s.Order != dev.Order {
		return ds
	}
	switch s.Phase {
	case protocol.UpdateCommitted:
		if sameVersion(dev.Running, version) {
			ds.State = StateDone
		} else {
			ds.State, ds.Reason = s.Phase, "committed; waiting for a heartbeat with "+version
		}
	case protocol.UpdateFailed, protocol.UpdateRolledBack:
		ds.State, ds.Reason = StateFailed, s.Phase+": "+s.Reason
	default:
		ds.State, ds.Percent = s.Phase, s.Percent
	}
	return ds
}

// refused says why the device cannot take the release (before any
// order): its architecture is missing, or it would be a downgrade.
func refused(dev Device, r Release, allowDowngrade bool) string {
	if r.Kind == protocol.ReleaseAgent && dev.Arch != "" && !archIn(dev.Arch, r.Arches) {
		return fmt.Sprintf("the release has no binaries for its architecture %s (it has %s)", dev.Arch, strings.Join(r.Arches, ", "))
	}
	if !allowDowngrade && dev.Running != "" {
		if c, err := protocol.CompareVersions(dev.Running, r.Version); err == nil && c > 0 {
			return fmt.Sprintf("runs %s, newer than %s (--allow-downgrade to go back)", dev.Running, r.Version)
		}
	}
	return ""
}

// archIn says whether a device of arch (GOARCH) can take one of
// arches: "arm" could be armv6 or armv7, which only the device knows, so
// either lets it be ordered (the device refuses a release without its own).
func archIn(arch string, arches []string) bool {
	if arch == "arm" {
		return slices.Contains(arches, "armv7") || slices.Contains(arches, "armv6")
	}
	return slices.Contains(arches, arch)
}

func sameVersion(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	c, err := protocol.CompareVersions(a, b)
	return err == nil && c == 0
}

// haltReason names the failed devices (the first few) and their reasons.
func haltReason(failed []DeviceStatus, verdicts, threshold, minimum int) string {
	return fmt.Sprintf("%d of %d devices with a verdict failed (%d%%), over the failure threshold of %d%% (judged once %d have one): ",
		len(failed), verdicts, len(failed)*100/verdicts, threshold, minimum) + listFailed(failed)
}

// failedReason names the devices that failed in an update that
// completed under its failure threshold.
func failedReason(failed []DeviceStatus) string {
	return fmt.Sprintf("%d devices failed (under the failure threshold): ", len(failed)) + listFailed(failed)
}

// listFailed is "ID: reason; ..." for the first five failed devices.
func listFailed(failed []DeviceStatus) string {
	var b strings.Builder
	for i, f := range failed {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(failed)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", f.ID, f.Reason)
	}
	return b.String()
}

// ParseMaxUnavailable reads "N" or "N%" of targets: at least 1.
func ParseMaxUnavailable(s string, targets int) (int, error) {
	if s == "" {
		s = DefaultMaxUnavailable
	}
	pct := strings.HasSuffix(s, "%")
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n < 1 || strings.HasPrefix(s, "+") || pct && n > 100 {
		return 0, fmt.Errorf("max-unavailable %q: want a whole number of devices (5) or a percentage (10%%), at least 1", s)
	}
	if pct {
		n = n * targets / 100
	}
	return max(n, 1), nil
}

// ParseFailureThreshold reads "N%" (or "N"), 1 to 100.
func ParseFailureThreshold(s string) (int, error) {
	if s == "" {
		s = DefaultFailureThreshold
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n < 1 || n > 100 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("failure-threshold %q: want a percentage from 1%% to 100%%", s)
	}
	return n, nil
}

// Running says whether an update is still driven: a paused or halted one
// is (its devices under way report), a complete or aborted one is not.
func (s Status) Running() bool { return s.Phase != Complete && s.Phase != Aborted }
