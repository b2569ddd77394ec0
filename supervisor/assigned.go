package supervisor

import (
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/desired"
)

// Assignments is the daemon's narrow side for a source of pods outside the
// device: the hub's uplink (sync/uplink), which cmd/podvisor attaches
// to it. Desired pods come in and verdicts on them go back; the daemon's
// status stream (every pod's status, pod events, the node) goes out.
// Daemon.Assignments returns it; the daemon knows nothing of the hub's
// wire or storage.
type Assignments interface {
	// ExpectAssigned says a hub is attached, with the hub pods it accepted
	// before (stored on the device): they run from the first
	// reconciliation, even with the hub out of reach. Call before Run.
	//
	// fence names the hub pods (namespace/name) the stored document
	// fences: they never start, and no other hub pod starts while one of
	// them still runs.
	ExpectAssigned(generation int64, stored []*v1.Pod, fence []string)
	// Conflicts are the verdicts on hub pods that cannot run here (a
	// file pod of the same name, the device's policy, a priority class
	// the device lacks), by namespace/name, with the reason. An error
	// means the daemon could not answer now.
	Conflicts(pods []*v1.Pod) (map[string]string, error)
	// ApplyAssigned makes the hub pods exactly these, under the
	// document's fence (as in ExpectAssigned); it is idempotent.
	ApplyAssigned(generation int64, pods []*v1.Pod, fence []string)
	// Renew renews the self-fencing leases at sent: the send time, on
	// the lease clock (lease.Now, CLOCK_BOOTTIME), of a report the hub
	// answered after this connection's desired document was taken.
	Renew(sent time.Time)
	// Pods is the status stream: every pod's newest status, the view's
	// version (0 until the first reconciliation is published), and a
	// channel closed at the next change.
	Pods() ([]*v1.Pod, uint64, <-chan struct{})
	// PodEvents are the pod events recorded since ExpectAssigned; they wait
	// in a bounded queue that drops the newest when full.
	PodEvents() <-chan PodEvent
	// Node is the device's node status.
	Node() (*v1.Node, error)
	// Stats is every pod's usage; the heartbeat's network summary comes
	// from it.
	Stats() ([]api.PodStats, error)
	// HubLink says how the hub connection stands, at each change:
	// connected or not since since (zero: no attempt has failed yet).
	// The service's status line tells it (service.go); it returns at
	// once, before Run too.
	HubLink(connected bool, since time.Time)
}

// PodEvent is an event about a pod, as describe shows it.
type PodEvent = desired.PodEvent

// errStopped is the answer to a request once the daemon's loop has ended.
var errStopped = errors.New("the daemon has stopped")

// Assignments is the daemon's side for the hub's uplink.
func (d *Daemon) Assignments() Assignments { return hubSide{d} }

// hubSide implements Assignments: the hub's pods go to the daemon's
// desired pods on its loop, its status stream comes from the daemon.
type hubSide struct{ d *Daemon }

var _ Assignments = hubSide{}

// ExpectAssigned implements Assignments.
func (h hubSide) ExpectAssigned(generation int64, stored []*v1.Pod, fence []string) {
	h.d.desired.ExpectHub(generation, stored, fence)
}

// Conflicts implements Assignments with the decision that applies the pods.
func (h hubSide) Conflicts(pods []*v1.Pod) (map[string]string, error) {
	var out map[string]string
	err := h.d.inbox.do(func() error {
		out = h.d.desired.Conflicts(pods)
		return nil
	})
	if out == nil {
		out = map[string]string{}
	}
	return out, err
}

// ApplyAssigned implements Assignments.
func (h hubSide) ApplyAssigned(gen int64, pods []*v1.Pod, fence []string) {
	for {
		err := h.d.inbox.do(func() error {
			h.d.desired.SetHub(gen, pods, fence)
			h.d.applyDesired()
			return nil
		})
		if err == nil || errors.Is(err, errStopped) {
			return
		}
		h.d.log.Warn("applying hub pods; retrying", "generation", gen, "err", err)
	}
}

// Renew implements Assignments.
func (h hubSide) Renew(sent time.Time) {
	h.d.inbox.do(func() error {
		// The step after this request gates (leases make desired Gated):
		// a pod the lease held back may start then.
		h.d.desired.Renew(sent)
		h.d.keepLease()
		return nil
	})
}

// Pods implements Assignments.
func (h hubSide) Pods() ([]*v1.Pod, uint64, <-chan struct{}) { return h.d.view.Pods() }

// PodEvents implements Assignments.
func (h hubSide) PodEvents() <-chan PodEvent { return h.d.desired.Events() }

// Node implements Assignments.
func (h hubSide) Node() (*v1.Node, error) { return localAPI(h).Node() }

// Stats implements Assignments.
func (h hubSide) Stats() ([]api.PodStats, error) { return localAPI(h).Stats() }

// applyDesired hands the core the file pods and the hub pods that may run
// (desired.Pods decides, its fence and leases gating them). While a fence
// or a lease is in force the loop's next step gates anyway.
func (d *Daemon) applyDesired() {
	if _, ok := d.desired.Desired(); ok && !d.desired.Gated() {
		d.gate()
	}
}
