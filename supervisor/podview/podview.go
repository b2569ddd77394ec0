// Package podview is the pod status the daemon publishes: every pod as a
// v1.Pod for the local API and the hub's uplink, the events describe
// shows, and where each container's logs are. The daemon's loop writes it
// from each step's Ready (the pods whose status changed); readers on any
// goroutine read the last version published and wait for the next.
package podview

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// maxEvents is how many events each pod keeps.
const maxEvents = 50

// StatusInvalid is the STATUS of a manifest file that was rejected.
const StatusInvalid = "Invalid"

// Options is what views are made with.
type Options struct {
	NodeName string
	HostIP   string
	// LogPath is where a container instance logs.
	LogPath func(pod *v1.Pod, container string, attempt int) string
	// RuntimeOf is the runtime that runs a pod (nil: none on the device).
	RuntimeOf func(pod *v1.Pod) runtime.Runtime
}

// Machine is what views are built from: the lifecycle core, read on the
// loop goroutine that owns it.
type Machine interface {
	Instances() []*lifecycle.Instance
	PodView(in *lifecycle.Instance, now time.Time) *v1.Pod
	PendingView() []*v1.Pod
}

// Sources is what the device's sources say beside the machine.
type Sources struct {
	// Desired reports whether a source still asks for namespace/name.
	Desired func(key string) bool
	// Invalid are the manifest files rejected, shown as rows of their own.
	Invalid []manifest.Invalid
}

// View is the published status. Publish and Record are for the loop;
// Pods, Events and Log for anyone.
type View struct {
	opts Options
	// cache holds each instance's view until a Ready says it changed:
	// with many pods, one event must not copy them all. Loop-owned.
	cache map[types.UID]*v1.Pod

	mu      sync.RWMutex
	pods    []*v1.Pod
	version uint64
	changed chan struct{}
	events  map[string][]api.Event // by namespace/name
	logs    map[string]api.LogRef  // by namespace/name/container, and …/previous
}

// New returns an empty view, version 0.
func New(opts Options) *View {
	return &View{opts: opts, cache: map[types.UID]*v1.Pod{}, changed: make(chan struct{}),
		events: map[string][]api.Event{}, logs: map[string]api.LogRef{}}
}

// Publish rebuilds the status from the machine at now and wakes the
// readers waiting for it. changed are the pods whose status changed since
// the last Publish (a Ready's Changed): only their views are built anew.
func (v *View) Publish(m Machine, now time.Time, changed []types.UID, src Sources) {
	for _, uid := range changed {
		delete(v.cache, uid)
	}
	var pods []*v1.Pod
	logs := map[string]api.LogRef{}
	seen := map[types.UID]bool{}
	for _, in := range m.Instances() {
		seen[in.UID()] = true
		pods = append(pods, v.podView(m, in, now))
		if in.Terminating && src.Desired(in.Key()) {
			continue // the replacement's logs are the ones to show
		}
		v.addLogs(logs, in)
	}
	for uid := range v.cache {
		if !seen[uid] {
			delete(v.cache, uid)
		}
	}
	for _, p := range m.PendingView() {
		p.Spec.NodeName = v.opts.NodeName
		pods = append(pods, p)
	}
	for _, bad := range src.Invalid {
		pods = append(pods, invalidRow(bad))
	}
	v.mu.Lock()
	v.pods, v.logs = pods, logs
	v.version++
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// addLogs indexes the logs of an instance's containers: the current
// attempt's and the one lastState shows.
func (v *View) addLogs(logs map[string]api.LogRef, in *lifecycle.Instance) {
	// The runtime that wrote a container's logs reads them back.
	reader, _ := v.opts.RuntimeOf(in.Pod).(runtime.LogReader)
	for _, c := range in.AllContainers() {
		key := in.Key() + "/" + c.Name
		if c.Attempt > 0 {
			logs[key] = api.LogRef{Path: v.opts.LogPath(in.Pod, c.Name, c.Attempt), InstanceID: c.InstanceID,
				Running: c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting, Reader: reader}
		}
		if prev := previousAttempt(c); prev > 0 {
			logs[key+"/previous"] = api.LogRef{Path: v.opts.LogPath(in.Pod, c.Name, prev), Reader: reader}
		}
	}
}

// podView returns the instance as a v1.Pod, from the cache unless it
// changed, with what the device and its runtime add.
func (v *View) podView(m Machine, in *lifecycle.Instance, now time.Time) *v1.Pod {
	if p, ok := v.cache[in.UID()]; ok {
		return p
	}
	p := m.PodView(in, now)
	p.Spec.NodeName = v.opts.NodeName
	p.Status.HostIP = v.opts.HostIP
	p.Status.HostIPs = []v1.HostIP{{IP: v.opts.HostIP}}
	ips := []string{v.opts.HostIP}
	rt := v.opts.RuntimeOf(p)
	switch pn, ok := rt.(runtime.PodNetworks); {
	case p.Spec.HostNetwork:
	case ok:
		ips = pn.PodIPs(p)
	case rt == nil:
		ips = nil // no runtime here to give it an address
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, v1.PodIP{IP: ip})
		}
	}
	if sd, ok := rt.(runtime.StatusDecorator); ok {
		sd.DecorateStatuses(p.Status.InitContainerStatuses)
		sd.DecorateStatuses(p.Status.ContainerStatuses)
	}
	v.cache[in.UID()] = p
	return p
}

// previousAttempt is the attempt of the instance shown as lastState: what
// "logs --previous" reads, whatever the container is doing now.
func previousAttempt(c *lifecycle.Container) int {
	if c.Last == nil {
		return 0
	}
	_, _, n, _ := vocab.ParseInstanceID(c.Last.InstanceID)
	return n
}

// invalidRow shows a rejected manifest file in pod listings, named after
// the file, until it is fixed or removed.
func invalidRow(bad manifest.Invalid) *v1.Pod {
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: filepath.Base(bad.File), Namespace: "default",
			CreationTimestamp: metav1.NewTime(bad.Since),
			Annotations: map[string]string{
				manifest.AnnotationSource: manifest.SourceFile,
				manifest.AnnotationFile:   bad.File,
			},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, Reason: StatusInvalid, Message: bad.File + ": " + bad.Err.Error()},
	}
}

// Note is an event to record about a pod.
type Note struct {
	Key                   string // namespace/name
	Type, Reason, Message string
}

// NewlyInvalid are the FailedValidation events for each file cur rejects
// that old did not (or not for the same reason): on the file's row, and
// on the pods it still keeps running.
func NewlyInvalid(old, cur manifest.State) []Note {
	before := map[string]string{}
	for _, b := range old.Invalid {
		before[b.File] = b.Err.Error()
	}
	var out []Note
	for _, b := range cur.Invalid {
		if before[b.File] == b.Err.Error() {
			continue
		}
		msg := fmt.Sprintf("%s: %v", b.File, b.Err)
		out = append(out, Note{"default/" + filepath.Base(b.File), "Warning", "FailedValidation", msg})
		for _, p := range cur.Pods {
			if p.Annotations[manifest.AnnotationFile] == b.File {
				out = append(out, Note{lifecycle.KeyOf(p), "Warning", "FailedValidation", msg + " (still running the last valid version)"})
			}
		}
	}
	return out
}

// Record keeps an event about a pod for describe: a repeat of the last
// one counts up, and each pod keeps its newest maxEvents.
func (v *View) Record(n Note, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	evs := v.events[n.Key]
	if k := len(evs); k > 0 && evs[k-1].Reason == n.Reason && evs[k-1].Message == n.Message {
		evs[k-1].Count++
		evs[k-1].LastTime = at
		return
	}
	evs = append(evs, api.Event{FirstTime: at, LastTime: at, Count: 1, Type: n.Type, Reason: n.Reason, Message: n.Message})
	if len(evs) > maxEvents {
		evs = evs[len(evs)-maxEvents:]
	}
	v.events[n.Key] = evs
}

// Pods returns every pod's newest status, the version published (0 until
// the first Publish) and a channel closed at the next.
func (v *View) Pods() ([]*v1.Pod, uint64, <-chan struct{}) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.pods, v.version, v.changed
}

// Events returns a pod's events, oldest first.
func (v *View) Events(namespace, name string) []api.Event {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]api.Event(nil), v.events[namespace+"/"+name]...)
}

// Log locates a container's current log, or with previous the one its
// lastState shows.
func (v *View) Log(namespace, name, container string, previous bool) (api.LogRef, error) {
	key := namespace + "/" + name + "/" + container
	if previous {
		key += "/previous"
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	ref, ok := v.logs[key]
	if !ok {
		if previous {
			return ref, fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
		}
		return ref, fmt.Errorf("container %q in pod %q has not started", container, name)
	}
	return ref, nil
}
