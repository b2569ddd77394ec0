package failover

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
	"github.com/podvisor/podvisor/test/simfleet"
	"github.com/podvisor/podvisor/test/syncbuf"
)

// sensorKey is the pod each simulated device reports a new status of at
// every tick of the stream (a pod of its own, as a file pod is), with
// the tick's number in tickAnnotation, and an event "tick N".
const (
	sensorKey      = "default/sensor"
	tickAnnotation = "failover.podvisor.io/tick"
)

// simDevice is one simulated device: a real uplink agent (its own
// certificate, its own SQLite store, signed documents checked) on the
// NATS nodes, in front of a pretend daemon that records every desired
// generation it is handed and reports every hub pod Running and Ready at
// once.
type simDevice struct {
	id    string
	agent *uplink.Agent
	st    *store.Store

	mu      sync.Mutex
	applied []int64            // the generations ApplyAssigned was handed, in order
	running map[string]*v1.Pod // hub pods by namespace/name
	tick    int64              // the newest tick published
}

// Conflicts implements uplink.Pods: every pod may run here.
func (*simDevice) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }

// Renew implements uplink.Pods: a simulated device runs no lease.
func (*simDevice) Renew(time.Time) {}

// Node implements uplink.Pods.
func (*simDevice) Node() (*v1.Node, error) { return simfleet.RoomyNode(), nil }

// ApplyAssigned implements uplink.Pods: it records the generation and
// reports the new pods Running and Ready, the gone ones gone.
func (d *simDevice) ApplyAssigned(gen int64, pods []*v1.Pod, _ []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = append(d.applied, gen)
	keep := map[string]bool{}
	var items []store.Item
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		keep[key] = true
		if d.running[key] == nil {
			d.running[key] = p
			items = append(items, podStatus(d.id, p, true))
		}
	}
	for key := range d.running {
		if !keep[key] {
			delete(d.running, key)
			items = append(items, store.Item{Key: key, Kind: store.KindPod})
		}
	}
	if len(items) > 0 {
		d.agent.Publish(items)
	}
}

// generations is a copy of the generations applied, in order.
func (d *simDevice) generations() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64(nil), d.applied...)
}

// publishTick reports the sensor pod's next status and an event: one
// batch of two items.
func (d *simDevice) publishTick() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.tick + 1
	ns, name, _ := strings.Cut(sensorKey, "/")
	p := &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{tickAnnotation: strconv.FormatInt(n, 10)}},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "host"}}}}
	ev, _ := json.Marshal(protocol.Event{Time: time.Now(), Type: "Normal", Reason: "Tick", Message: fmt.Sprintf("tick %d", n)})
	items := []store.Item{podStatus(d.id, p, true), {Key: sensorKey, Kind: store.KindEvent, Payload: ev}}
	if err := d.agent.Publish(items); err != nil {
		return fmt.Errorf("%s: publishing tick %d: %w", d.id, n, err)
	}
	d.tick = n
	return nil
}

// runsApp tells whether a hub pod labelled app=app runs here.
func (d *simDevice) runsApp(app string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.running {
		if p.Labels["app"] == app {
			return true
		}
	}
	return false
}

func (d *simDevice) lastTick() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tick
}

// podStatus is a pod's mirror as a daemon reports it: Running, Ready or
// not.
func podStatus(node string, p *v1.Pod, ready bool) store.Item {
	now := metav1.Now()
	cond := v1.ConditionFalse
	if ready {
		cond = v1.ConditionTrue
	}
	m := &v1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels,
		Annotations: p.Annotations, OwnerReferences: p.OwnerReferences}, Spec: v1.PodSpec{NodeName: node, Containers: p.Spec.Containers}}
	m.Status = v1.PodStatus{Phase: v1.PodRunning, StartTime: &now, Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: cond, LastTransitionTime: now},
		{Type: v1.ContainersReady, Status: cond, LastTransitionTime: now}},
		ContainerStatuses: []v1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Ready: ready, Image: p.Spec.Containers[0].Image,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}}}}
	b, _ := json.Marshal(m)
	return store.Item{Key: p.Namespace + "/" + p.Name, Kind: store.KindPod, Payload: b}
}

// simFleet is the simulated devices, running until the test ends.
type simFleet struct {
	devices []*simDevice
	byID    map[string]*simDevice
	stop    chan struct{}
	done    sync.WaitGroup
	// log is every agent's log (Info and above), each line naming its
	// device (sim=ID): a failure shows the lagging devices' lines.
	log *syncbuf.Buffer
}

// logOf is the lines of the agents' log of device id.
func (f *simFleet) logOf(id string) string {
	var out []string
	for _, line := range strings.Split(f.log.String(), "\n") {
		if strings.Contains(line, " sim="+id) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// simIDs are n simulated devices' IDs.
func simIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sim-%04d", i)
	}
	return ids
}

// startSims starts a simulated device for each ID, enrolled from podhub's
// data directory (its CA issues their certificates), on the brokers.
// Their stores are on /dev/shm where there is one: a device stores a
// desired document durably before it acknowledges it, and thousands of
// them sharing one disk would queue behind each other's fsyncs.
func startSims(t *testing.T, data string, brokers, ids []string) *simFleet {
	t.Helper()
	e, err := simfleet.LoadEnrolment(data, strings.TrimPrefix(brokers[0], "mqtts://"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "podvisor-failover-sims-")
	if err != nil {
		dir = t.TempDir()
	}
	f := &simFleet{byID: map[string]*simDevice{}, stop: make(chan struct{}), log: &syncbuf.Buffer{}}
	t.Cleanup(func() {
		f.close(t)
		os.RemoveAll(dir)
	})
	log := slog.New(slog.NewTextHandler(f.log, nil))
	for _, id := range ids {
		dev, err := e.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(filepath.Join(dir, id, "state.db"), store.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		d := &simDevice{id: id, st: st, running: map[string]*v1.Pod{}}
		cfg := dev.UplinkConfig(brokers...)
		// Heartbeats as a real device's (30 s); reconnect attempts at
		// most 5 s apart, so a device is back soon after the cluster
		// has elected new stream leaders.
		cfg.Heartbeat, cfg.BackoffMax = 30*time.Second, 5*time.Second
		if d.agent, err = uplink.New(cfg, st, d, log.With("sim", id)); err != nil {
			t.Fatal(err)
		}
		f.devices = append(f.devices, d)
		f.byID[id] = d
	}
	// Started a few at a time (50 a second), as a fleet comes online,
	// not all in one instant: NATS 2.9 makes a JetStream consumer for
	// each QoS 1 subscription of each session, and a storm of them on a
	// loaded machine times out and refuses subscriptions (SUBACK 0x80).
	for i, d := range f.devices {
		if i > 0 && i%10 == 0 {
			time.Sleep(200 * time.Millisecond)
		}
		f.done.Add(1)
		go func() { defer f.done.Done(); d.agent.Run(f.stop) }()
	}
	return f
}

// close stops every agent (bounded) and closes the stores.
func (f *simFleet) close(t *testing.T) {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	done := make(chan struct{})
	go func() { f.done.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Errorf("simulated devices' agents still running 60 s after their stop")
	}
	for _, d := range f.devices {
		d.st.Close()
	}
}

// stream publishes a tick of every device, one device after the other,
// each device once per period, until stop is closed; it returns how many
// ticks it published, and the first error.
type stream struct {
	stop    chan struct{}
	done    chan struct{}
	ticks   atomic.Int64
	err     atomic.Value // error
	started time.Time
	ended   time.Time
}

func (f *simFleet) startStream(period time.Duration) *stream {
	s := &stream{stop: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	gap := period / time.Duration(len(f.devices))
	go func() {
		defer close(s.done)
		next := time.Now()
		for {
			for _, d := range f.devices {
				select {
				case <-s.stop:
					s.ended = time.Now()
					return
				default:
				}
				if err := d.publishTick(); err != nil && s.err.Load() == nil {
					s.err.Store(err)
				}
				s.ticks.Add(1)
				next = next.Add(gap)
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
			}
		}
	}()
	return s
}

// end stops the stream and waits for its last tick.
func (s *stream) end() error {
	close(s.stop)
	<-s.done
	if err, _ := s.err.Load().(error); err != nil {
		return err
	}
	return nil
}
