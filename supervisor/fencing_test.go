package supervisor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/lease"
	"github.com/podvisor/podvisor/supervisor/desired"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
)

// slowStop is the fake runtime whose containers do not end on their stop
// signal: the test ends them (a pod in its grace period).
type slowStop struct {
	*fakeRuntime
	sigMu     sync.Mutex
	signalled []string
}

func (s *slowStop) Signal(id string, sig syscall.Signal) error {
	s.sigMu.Lock()
	s.signalled = append(s.signalled, id)
	s.sigMu.Unlock()
	return nil
}

func (s *slowStop) wasSignalled(id string) bool {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	return slices.Contains(s.signalled, id)
}

func hubTestPod(name string, annotations map[string]string) *v1.Pod {
	grace := int64(30)
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
}

// instanceOf is the newest instance of namespace/name, or nil.
func instanceOf(d *Daemon, key string) *lifecycle.Instance {
	var found *lifecycle.Instance
	for _, in := range d.machine.Instances() {
		if in.Key() == key {
			found = in
		}
	}
	return found
}

func runningKey(d *Daemon, key string) bool {
	in := instanceOf(d, key)
	return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
}

// A document that fences a running pod stops it before any other pod of
// the document starts: the new pod waits while the fenced one is in its
// grace period, and starts once it is gone.
func TestFenceStopsFencedPodsBeforeStartingOthers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &slowStop{fakeRuntime: newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	d.desired.ExpectHub(1, []*v1.Pod{hubTestPod("db", nil)}, nil)
	d.applyDesired()
	runUntil(t, d, "the hub pod db runs", func() bool { return runningKey(d, "default/db") })
	dbInstance := instanceOf(d, "default/db").Container("app").InstanceID

	// Generation 2: db is fenced, and web is given (as after a fence is
	// lifted, with db's stop still under way).
	d.desired.SetHub(2, []*v1.Pod{hubTestPod("web", nil)}, []string{"default/db"})
	d.applyDesired()
	runUntil(t, d, "db is sent its stop signal", func() bool { return fake.wasSignalled(dbInstance) })
	for range 3 {
		d.step()
	}
	if in := instanceOf(d, "default/web"); in != nil {
		t.Fatal("web was made while the fenced db still runs")
	}
	fake.end(dbInstance, 0, 15)
	runUntil(t, d, "web runs once db is gone", func() bool { return runningKey(d, "default/web") })
	if instanceOf(d, "default/db") != nil {
		t.Fatal("the fenced db is still known after web started")
	}
	// The fence holds: db given again under the same fence never starts.
	d.desired.SetHub(3, []*v1.Pod{hubTestPod("web", nil), hubTestPod("db", nil)}, []string{"default/db"})
	d.applyDesired()
	for range 3 {
		d.step()
	}
	if instanceOf(d, "default/db") != nil {
		t.Fatal("a fenced pod started again")
	}
}

// A pod with a self-fencing lease starts only once the hub has answered,
// stops (DisruptionTarget, TerminationByKubelet) when the lease runs out
// with the link silent — the daemon wakes for it, no polling — and runs
// again when a renewal makes the lease hold.
func TestLeaseStopsAndRevivesPod(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &slowStop{fakeRuntime: newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	clock := time.Now()
	d.now = func() time.Time { return clock }
	d.desired.SetLeaseClock(func() time.Time { return clock })
	p := hubTestPod("store", map[string]string{lease.Annotation: "10"})
	d.desired.ExpectHub(1, []*v1.Pod{p}, nil)
	d.applyDesired()
	for range 3 {
		d.step()
	}
	if instanceOf(d, "default/store") != nil {
		t.Fatal("a lease pod started before the hub answered since the daemon started")
	}

	renewed := clock
	d.desired.Renew(renewed)
	d.gate()
	runUntil(t, d, "the lease pod runs", func() bool { return runningKey(d, "default/store") })
	if next := d.step(); !next.Equal(renewed.Add(10 * time.Second)) {
		t.Fatalf("the daemon wakes at %v, want the lease's expiry %v", next.Sub(clock), renewed.Add(10*time.Second).Sub(clock))
	}
	first := instanceOf(d, "default/store").Container("app").InstanceID

	clock = renewed.Add(9 * time.Second)
	d.step()
	if fake.wasSignalled(first) {
		t.Fatal("stopped before the lease ran out")
	}
	clock = renewed.Add(10 * time.Second)
	d.step()
	if !fake.wasSignalled(first) {
		t.Fatal("not stopped when the lease ran out")
	}
	pods, _, _ := d.API().Pods()
	var cond *v1.PodCondition
	for i := range pods[0].Status.Conditions {
		if pods[0].Status.Conditions[i].Type == v1.DisruptionTarget {
			cond = &pods[0].Status.Conditions[i]
		}
	}
	if cond == nil || cond.Status != v1.ConditionTrue || cond.Reason != v1.PodReasonTerminationByKubelet || !strings.Contains(cond.Message, "lease") {
		t.Fatalf("DisruptionTarget condition %+v, want True TerminationByKubelet saying the lease expired", cond)
	}
	fake.end(first, 0, 15)
	runUntil(t, d, "the stopped pod is Failed", func() bool {
		pods, _, _ := d.API().Pods()
		return len(pods) == 1 && pods[0].Status.Phase == v1.PodFailed
	})
	if pods, _, _ := d.API().Pods(); pods[0].Status.Reason != lifecycle.ReasonLeaseExpired {
		t.Fatalf("status reason %q, want %s", pods[0].Status.Reason, lifecycle.ReasonLeaseExpired)
	}

	// The link returns: the next renewal revives it.
	clock = clock.Add(time.Minute)
	d.desired.Renew(clock)
	d.gate()
	runUntil(t, d, "the pod runs again after the renewal", func() bool {
		started, _, _ := fake.snapshot()
		return len(started) == 2 && runningKey(d, "default/store")
	})
}

// The last renewal outlives a restart of the daemon within one boot (the
// lease clock runs on), never a reboot (another boot ID).
func TestLeaseRenewalKeptAcrossADaemonRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	renewed := lease.Now().Add(-time.Second)
	d.desired.Renew(renewed)
	d.saveLease()

	fresh := func() *desired.Pods { return desired.New(desired.Options{Log: d.log}) }
	d.desired = fresh()
	d.loadLease()
	if got := d.desired.Renewed(); !got.Equal(renewed) {
		t.Fatalf("renewal after a restart %v, want %v", got, renewed)
	}

	path := filepath.Join(d.cfg.DataDir, leaseFile)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), pidfd.BootID(), "another-boot", 1)), 0o600)
	d.desired = fresh()
	d.loadLease()
	if got := d.desired.Renewed(); !got.IsZero() {
		t.Fatalf("a renewal from another boot was taken: %v", got)
	}
}

// While a lease is in force, a renewal is written as it is taken, not only
// at a clean exit: a daemon killed (or restarted by its watchdog) leaves
// its successor a recent renewal. Writes are throttled.
func TestLeaseRenewalKeptBeforeExit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	path := filepath.Join(d.cfg.DataDir, leaseFile)
	renewed := lease.Now()
	d.desired.Renew(renewed)
	d.keepLease()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a renewal written with no lease in force (stat: %v)", err)
	}
	d.desired.ExpectHub(1, []*v1.Pod{hubTestPod("store", map[string]string{lease.Annotation: "10"})}, nil)
	d.applyDesired()
	d.keepLease()
	var saved savedLease
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &saved) != nil || saved.Renewed != renewed.UnixNano() {
		t.Fatalf("lease file %q (%v), want the renewal at %d", b, err, renewed.UnixNano())
	}
	d.desired.Renew(renewed.Add(time.Second))
	d.keepLease()
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Fatalf("lease file rewritten within %v: %s", leaseSaveEvery, b2)
	}
}
