package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// The fleet model of the at-most-once property test (atmostonce_test.go):
// the hub as SchedulePass runs it, the devices as they behave.

var epoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// simTimeout is the model hub's device timeout.
const simTimeout = 40 * time.Second

type simDevice struct {
	name     string
	up, link bool
	// rateNum/rateDen: the device's clock runs at that rate of the hub's.
	rateNum, rateDen int64
	doc              map[string]*v1.Pod // the last desired document it got
	running          map[string]*v1.Pod
	// heard is the device clock when it last heard from the hub; a
	// rebooted device has not (heardOK false) until it does.
	heard   time.Duration
	heardOK bool
	// What the hub holds of it.
	fenced   bool
	lastSeen time.Time
	ack      int64
	mirrors  map[string]bool
}

type world struct {
	now, started time.Time
	devices      []*simDevice
	sets         []*appsv1.StatefulSet
	pods         []*v1.Pod // the hub's books
	gen          map[string]int64
	want         map[string][]*v1.Pod
	readySince   map[types.NamespacedName]time.Time
	trace        []string
	violation    string
	// stats are shared by a world's clones: what the runs exercised.
	stats *simStats
}

type simStats struct{ forced, confirmed, moved int }

func (w *world) clone() *world {
	c := *w
	c.devices = make([]*simDevice, len(w.devices))
	for i, d := range w.devices {
		dc := *d
		dc.doc, dc.running, dc.mirrors = maps.Clone(d.doc), maps.Clone(d.running), maps.Clone(d.mirrors)
		c.devices[i] = &dc
	}
	c.pods = slices.Clone(w.pods)
	c.gen, c.want, c.readySince = maps.Clone(w.gen), maps.Clone(w.want), maps.Clone(w.readySince)
	c.trace = slices.Clone(w.trace)
	return &c
}

func simSet(name string, replicas int32, lease string, policy appsv1.PodManagementPolicyType) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	grace, tol := int64(10), int64(30)
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Generation: 1}}
	s.Spec.Replicas = &replicas
	s.Spec.PodManagementPolicy = policy
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	s.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	s.Spec.Template.Labels = labels
	if lease != "" {
		s.Spec.Template.Annotations = map[string]string{workloads.AnnotationLeaseSeconds: lease}
	}
	s.Spec.Template.Spec = v1.PodSpec{TerminationGracePeriodSeconds: &grace, RestartPolicy: v1.RestartPolicyAlways,
		Containers: []v1.Container{{Name: "c", Image: "host"}},
		Tolerations: []v1.Toleration{
			{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &tol},
			{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &tol}}}
	return s
}

// newWorld is a fleet of connected devices with clocks at those rates
// (num/den), two StatefulSets (db: OrderedReady, no lease; lz: Parallel,
// a 60 s lease), run until they converged.
func newWorld(t *testing.T, rates ...[2]int64) *world {
	w := &world{now: epoch, started: epoch, gen: map[string]int64{}, want: map[string][]*v1.Pod{}, stats: &simStats{},
		readySince: map[types.NamespacedName]time.Time{},
		sets: []*appsv1.StatefulSet{simSet("db", 2, "", appsv1.OrderedReadyPodManagement),
			simSet("lz", 2, "60", appsv1.ParallelPodManagement)}}
	for i, r := range rates {
		w.devices = append(w.devices, &simDevice{name: string(rune('a' + i)), up: true, link: true, rateNum: r[0], rateDen: r[1],
			doc: map[string]*v1.Pod{}, running: map[string]*v1.Pod{}, mirrors: map[string]bool{}, lastSeen: epoch})
	}
	w.heal()
	if msg := w.converged(); msg != "" {
		t.Fatalf("the fleet never converged at the start: %s", msg)
	}
	return w
}

func (w *world) clock(d *simDevice) time.Duration {
	return time.Duration(int64(w.now.Sub(epoch)) * d.rateNum / d.rateDen)
}

// tick is the devices on their own: a crashed device runs nothing; a
// lease pod has stopped once the device went its lease and grace period
// without hearing from the hub.
func (w *world) tick() {
	for _, d := range w.devices {
		if !d.up {
			clear(d.running)
			continue
		}
		for name, p := range d.running {
			lease := workloads.LeaseSeconds(p)
			if lease == 0 {
				continue
			}
			if !d.heardOK || w.clock(d) >= d.heard+time.Duration(lease)*time.Second+workloads.GracePeriod(p) {
				delete(d.running, name)
			}
		}
	}
}

// sync is a connected device hearing the hub: it applies its newest
// desired document (a rebooted device starts only from it) and reports
// what runs.
func (w *world) sync() {
	for _, d := range w.devices {
		if !d.up || !d.link {
			continue
		}
		d.heard, d.heardOK = w.clock(d), true
		d.doc = map[string]*v1.Pod{}
		for _, p := range w.want[d.name] {
			d.doc[p.Name] = p
		}
		for name := range d.running {
			if d.doc[name] == nil {
				delete(d.running, name)
			}
		}
		for name, p := range d.doc {
			if d.running[name] == nil {
				d.running[name] = p
			}
		}
		d.lastSeen, d.ack = w.now, w.gen[d.name]
		d.mirrors = map[string]bool{}
		for name := range d.running {
			d.mirrors[name] = true
			if k := key(name); w.readySince[k].IsZero() {
				w.readySince[k] = w.now
			}
		}
	}
	w.check("device sync")
}

// devicesRan says whether a device other than dev has the pod in its
// last document: a pod bound there moved.
func (w *world) devicesRan(name, dev string) bool {
	return slices.ContainsFunc(w.devices, func(d *simDevice) bool { return d.name != dev && d.doc[name] != nil })
}

// check records the first identity found live on two devices.
func (w *world) check(when string) {
	where := map[string]string{}
	for _, d := range w.devices {
		if !d.up {
			continue
		}
		for name := range d.running {
			if other, dup := where[name]; dup && w.violation == "" {
				w.violation = fmt.Sprintf("%s: %s runs on %s and %s at +%s", when, name, other, d.name, w.now.Sub(epoch))
			}
			where[name] = d.name
		}
	}
}

func (w *world) scheduleDevices() ([]schedule.Device, time.Time) {
	var out []schedule.Device
	var next time.Time
	for _, d := range w.devices {
		ready := w.now.Sub(d.lastSeen) < simTimeout
		since, wake := silence(ready, d.lastSeen, w.started, simTimeout, w.now)
		next = earliest(next, wake)
		out = append(out, schedule.Device{Name: d.name, Labels: map[string]string{v1.LabelHostname: d.name},
			Allocatable:      v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi")},
			Conditions:       []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			UnreachableSince: since, Fenced: d.fenced})
	}
	return out, next
}

// pass is SchedulePass over the model: schedule, store, push the desired
// documents that changed, forget what the devices confirmed stopped. It
// returns when the hub wakes next.
func (w *world) pass() time.Time {
	devices, next := w.scheduleDevices()
	observed := map[types.NamespacedName]workloads.Observed{}
	byName := map[string]*simDevice{}
	for _, d := range w.devices {
		byName[d.name] = d
	}
	taken := map[string]bool{}
	for _, p := range w.pods {
		taken[p.Name] = true
		if d := byName[p.Spec.NodeName]; d != nil && d.mirrors[p.Name] {
			observed[key(p.Name)] = workloads.Observed{Reported: true, Phase: v1.PodRunning, Ready: true, ReadySince: w.readySince[key(p.Name)]}
		}
	}
	plan := schedule.Schedule(schedule.Input{Now: w.now, Devices: devices, StatefulSets: w.sets, Pods: w.pods, Observed: observed})
	for _, d := range plan.Deletions {
		if d.Force {
			w.stats.forced++
		}
	}
	for _, b := range plan.Bindings {
		if w.readySince[b.Pod].IsZero() && w.devicesRan(b.Pod.Name, b.Device) {
			w.stats.moved++
		}
	}
	for _, p := range plan.Create {
		if taken[p.Name] && w.violation == "" {
			w.violation = fmt.Sprintf("the hub made %s while it still held one at +%s", p.Name, w.now.Sub(epoch))
		}
	}
	pods, _, gone := applyPlan(w.pods, plan, w.now)
	w.pods = w.pods[:0:0]
	for _, k := range slices.SortedFunc(maps.Keys(pods), func(a, b types.NamespacedName) int { return strings.Compare(a.Name, b.Name) }) {
		if !gone[k] {
			w.pods = append(w.pods, pods[k])
		} else {
			delete(w.readySince, k)
		}
	}
	// The hub's view: one record per identity, bound to one device.
	held := map[string]bool{}
	for _, p := range w.pods {
		if held[p.Name] && w.violation == "" {
			w.violation = fmt.Sprintf("the hub holds %s twice at +%s", p.Name, w.now.Sub(epoch))
		}
		held[p.Name] = true
	}
	for _, d := range w.devices {
		var want []*v1.Pod
		for _, p := range w.pods {
			if p.Spec.NodeName == d.name && p.DeletionTimestamp == nil {
				want = append(want, p)
			}
		}
		if !slices.EqualFunc(want, w.want[d.name], func(a, b *v1.Pod) bool {
			return a.Name == b.Name && a.UID == b.UID && a.Spec.NodeName == b.Spec.NodeName
		}) {
			w.gen[d.name]++
			w.want[d.name] = want
		}
	}
	// forgetStopped: the device applied its newest generation and
	// reports no such pod.
	w.pods = slices.DeleteFunc(w.pods, func(p *v1.Pod) bool {
		d := byName[p.Spec.NodeName]
		stopped := p.DeletionTimestamp != nil && d != nil && d.ack >= w.gen[d.name] && !d.mirrors[p.Name]
		if stopped {
			delete(w.readySince, key(p.Name))
			w.stats.confirmed++
		}
		return stopped
	})
	if slices.ContainsFunc(plan.Deletions, func(d schedule.Deletion) bool { return d.Force }) {
		next = w.now // Reschedule
	}
	return earliest(earliest(next, tolerationDeadline(devices, w.pods)), plan.Wake)
}

// round is what happens at one moment: the devices act and report, the
// hub passes (twice when it asks for a pass at once), the connected
// devices get their documents.
func (w *world) round() time.Time {
	w.tick()
	w.check("tick")
	w.sync() // the connected devices' heartbeats
	next := w.pass()
	w.sync()
	if !next.After(w.now) {
		next = w.pass()
		w.sync()
	}
	return next
}

// advance moves the hub's clock by dt, stopping at every moment the hub
// would wake by itself (a toleration or lease running out) — the
// earliest the hub may act, so the likeliest moment to act too soon.
func (w *world) advance(dt time.Duration) {
	end := w.now.Add(dt)
	next := w.round()
	for !next.IsZero() && next.After(w.now) && !next.After(end) {
		w.now = next
		next = w.round()
	}
	w.now = end
	w.round()
}

// heal connects every device (a crashed one boots connected) and lets
// the hub run for a while.
func (w *world) heal() {
	for _, d := range w.devices {
		if !d.up {
			d.up, d.heardOK = true, false
		}
		d.link = true
	}
	for range 12 {
		w.advance(20 * time.Second)
	}
}

// converged: every identity of every set runs on one device, bound there
// at the hub, with nothing left terminating.
func (w *world) converged() string {
	for _, s := range w.sets {
		for i := range int(*s.Spec.Replicas) {
			name := fmt.Sprintf("%s-%d", s.Name, i)
			var on []string
			for _, d := range w.devices {
				if d.up && d.running[name] != nil {
					on = append(on, d.name)
				}
			}
			bound := ""
			for _, p := range w.pods {
				if p.Name == name && p.DeletionTimestamp == nil {
					bound = p.Spec.NodeName
				}
			}
			if len(on) != 1 || bound != on[0] {
				return fmt.Sprintf("%s runs on %v, bound to %q", name, on, bound)
			}
		}
	}
	for _, p := range w.pods {
		if p.DeletionTimestamp != nil {
			return fmt.Sprintf("%s still terminating on %s", p.Name, p.Spec.NodeName)
		}
	}
	return ""
}
