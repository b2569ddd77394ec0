package simfleet

import (
	"encoding/json"
	"runtime"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/store"
)

// Publisher is where a device's pod statuses go: its uplink agent.
type Publisher interface {
	Publish(items []store.Item) error
}

// ReadyDevice is a simulated device whose pods become Running and Ready
// ReadyAfter after it applies them, reported through its agent as a
// daemon reports its mirror pods; a pod it no longer runs is reported
// gone at once. A pod Broken selects never becomes Ready: it runs and
// fails its readiness, as a bad release does.
type ReadyDevice struct {
	ID         string
	ReadyAfter time.Duration
	Broken     func(*v1.Pod) bool
	// Changed is called, under the device's lock, with the pods it runs
	// and which of them are Ready, after every change.
	Changed func(id string, running map[string]*v1.Pod, ready map[string]bool)

	mu      sync.Mutex
	agent   Publisher
	running map[string]*v1.Pod // by namespace/name
	ready   map[string]bool
	timers  map[string]*time.Timer
}

// Attach gives the device its agent, before the agent runs.
func (d *ReadyDevice) Attach(a Publisher) {
	d.mu.Lock()
	d.agent = a
	d.mu.Unlock()
}

// Stop stops the device's pending readiness: a stopped device reports
// nothing more.
func (d *ReadyDevice) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.timers {
		t.Stop()
	}
	d.agent = nil
}

// Conflicts implements uplink.Pods: every pod may run here.
func (*ReadyDevice) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }

// Renew implements uplink.Pods: a simulated device runs no lease.
func (*ReadyDevice) Renew(time.Time) {}

// ApplyAssigned implements uplink.Pods: the new pods start (and report
// Running, not Ready), the pods gone — or fenced — stop (and report gone).
func (d *ReadyDevice) ApplyAssigned(_ int64, pods []*v1.Pod, _ []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running == nil {
		d.running, d.ready, d.timers = map[string]*v1.Pod{}, map[string]bool{}, map[string]*time.Timer{}
	}
	keep := map[string]bool{}
	var items []store.Item
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		keep[key] = true
		if d.running[key] != nil {
			continue
		}
		d.running[key] = p
		items = append(items, d.status(p, false))
		if d.Broken == nil || !d.Broken(p) {
			d.timers[key] = time.AfterFunc(d.ReadyAfter, func() { d.becomeReady(key, p) })
		}
	}
	for key := range d.running {
		if !keep[key] {
			if t := d.timers[key]; t != nil {
				t.Stop()
			}
			delete(d.running, key)
			delete(d.ready, key)
			delete(d.timers, key)
			items = append(items, store.Item{Key: key, Kind: store.KindPod})
		}
	}
	d.changed()
	if len(items) > 0 && d.agent != nil {
		d.agent.Publish(items)
	}
}

func (d *ReadyDevice) becomeReady(key string, p *v1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[key] != p || d.agent == nil {
		return // stopped, or replaced, meanwhile
	}
	d.ready[key] = true
	d.changed()
	d.agent.Publish([]store.Item{d.status(p, true)})
}

func (d *ReadyDevice) changed() {
	if d.Changed != nil {
		d.Changed(d.ID, d.running, d.ready)
	}
}

// status is a pod's mirror as a daemon reports it: Running, and Ready
// or not.
func (d *ReadyDevice) status(p *v1.Pod, ready bool) store.Item {
	now := metav1.Now()
	cond := v1.ConditionFalse
	if ready {
		cond = v1.ConditionTrue
	}
	m := &v1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations,
		OwnerReferences: p.OwnerReferences}, Spec: v1.PodSpec{NodeName: d.ID, Containers: p.Spec.Containers}}
	m.Status = v1.PodStatus{Phase: v1.PodRunning, StartTime: &now, Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: cond, LastTransitionTime: now},
		{Type: v1.ContainersReady, Status: cond, LastTransitionTime: now}},
		ContainerStatuses: []v1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Ready: ready, Image: p.Spec.Containers[0].Image,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}}}}
	b, _ := json.Marshal(m)
	return store.Item{Key: p.Namespace + "/" + p.Name, Kind: store.KindPod, Payload: b}
}

// Node implements uplink.Pods: room for many small pods.
func (*ReadyDevice) Node() (*v1.Node, error) { return RoomyNode(), nil }

// RoomyNode is a Ready node with room for many small pods.
func RoomyNode() *v1.Node {
	room := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{Status: v1.NodeStatus{Capacity: room, Allocatable: room,
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		NodeInfo:   v1.NodeSystemInfo{Architecture: runtime.GOARCH, OperatingSystem: "linux"}}}
}
