package kubeapi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
)

// The kubelet's mirror pod annotations (k8s.io/kubernetes
// pkg/kubelet/types).
const (
	annotationConfigMirror = "kubernetes.io/config.mirror"
	annotationConfigSource = "kubernetes.io/config.source"
	annotationConfigHash   = "kubernetes.io/config.hash"
)

// Sources of objects that no device produced.
const (
	sourceHub        = "\x00hub"        // workloads, PriorityClasses, PDBs, the hub's unbound pods
	sourceNamespaces = "\x00namespaces" // namespaces, derived from what is stored
)

// refresher keeps the store in step with the fleet database.
type refresher struct {
	// mu serialises the re-reads (the loop's, the first load's).
	mu    sync.Mutex
	cfg   Config
	store *store
	// ready: each known device's readiness at the last read.
	ready map[string]bool
	// hubPods: a hash of the hub's pods bound to each device ("" for
	// none) at the last read, so that a scheduling pass re-reads only
	// the devices whose hub pods it changed.
	hubPods map[string][32]byte
	// staleAt is when each Ready device turns NotReady if the hub hears
	// nothing more from it.
	staleAt map[string]time.Time
}

// run follows the fleet's changes until ctx ends. A device that goes
// silent publishes nothing: the nodes are re-read when the first Ready
// one would pass the timeout unheard from, and every Resync at the
// latest (a safety net).
func (r *refresher) run(ctx context.Context, sub *fleetwatch.Sub) {
	t := time.NewTimer(r.untilStale())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Ready():
			r.locked(func() { r.apply(sub.Take()) })
		case <-t.C:
			r.locked(r.resyncNodes)
		}
		t.Reset(r.untilStale())
	}
}

// staleMargin is how long after a device's deadline its node is re-read,
// so that the clock is past it.
const staleMargin = 50 * time.Millisecond

// untilStale is the wait until the first Ready device passes the timeout
// unheard from, Resync at most.
func (r *refresher) untilStale() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait, now := r.cfg.Resync, r.cfg.Now()
	for _, at := range r.staleAt {
		if d := at.Sub(now) + staleMargin; d < wait {
			wait = max(d, staleMargin)
		}
	}
	return wait
}

// failed logs a read of the fleet that failed: what it would have
// changed waits for the next change or resync.
func (r *refresher) failed(err error) {
	if r.cfg.Log != nil {
		r.cfg.Log.Warn("kubeapi: reading the fleet", "err", err)
	}
}

// locked runs fn alone.
func (r *refresher) locked(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn()
}

// apply re-reads what changed: each device named, and after a
// scheduling pass (the hub's workloads changed) the workloads and the
// devices whose hub pods it changed; everything after the change feed
// lost other replicas' changes (fleetwatch.Everything).
func (r *refresher) apply(changes []fleetwatch.Change) {
	for _, c := range changes {
		if c.What&fleetwatch.Everything != 0 {
			r.fullResync()
			return
		}
	}
	for _, c := range changes {
		if c.Device == "" || c.What&fleetwatch.Workloads != 0 {
			r.workloadsChanged()
			continue
		}
		r.refreshDevice(c.Device)
	}
	r.refreshNamespaces()
}

// workloadsChanged re-reads the hub's workloads and pods, and the devices
// whose hub pods differ from the last read.
func (r *refresher) workloadsChanged() {
	if r.cfg.Workloads == nil {
		return
	}
	byDevice, hashes, err := r.hubPodsByDevice()
	if err != nil {
		r.failed(err)
		return
	}
	unbound := unboundPods(byDevice, func(d string) bool { _, known := r.ready[d]; return known })
	for d := range r.ready {
		if hashes[d] != r.hubPods[d] {
			r.refreshDevice(d)
		}
	}
	r.hubPods = hashes
	r.store.replace(resPods, sourceHub, unbound)
	r.storeWorkloads()
}

// hubPodsByDevice reads the hub's pods grouped by their device ("" for
// none yet), with a hash of each group.
func (r *refresher) hubPodsByDevice() (map[string][]*v1.Pod, map[string][32]byte, error) {
	pods, err := r.cfg.Workloads.HubPods()
	if err != nil {
		return nil, nil, err
	}
	byDevice := map[string][]*v1.Pod{}
	for _, p := range pods {
		byDevice[p.Spec.NodeName] = append(byDevice[p.Spec.NodeName], p)
	}
	hashes := make(map[string][32]byte, len(byDevice))
	for d, ps := range byDevice {
		hashes[d] = hashPods(ps)
	}
	return byDevice, hashes, nil
}

// unboundPods are the hub's pods bound to no device, or to one the fleet
// does not know (known), as the API lists them: on no node's behalf.
func unboundPods(byDevice map[string][]*v1.Pod, known func(device string) bool) []*object {
	var out []*object
	for d, ps := range byDevice {
		if d != "" && known(d) {
			continue
		}
		for _, p := range ps {
			out = append(out, podObject(hubPodOnly(p), "", true))
		}
	}
	return out
}

// hashPods is a hash of pods' JSON.
func hashPods(pods []*v1.Pod) [32]byte {
	h := sha256.New()
	for _, p := range pods {
		b, _ := json.Marshal(p)
		h.Write(b)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// fullResync re-reads the whole fleet.
func (r *refresher) fullResync() {
	now := r.cfg.Now()
	devices, err := r.cfg.Fleet.Devices(now, r.cfg.Timeout)
	if err != nil {
		r.failed(err)
		return
	}
	sched, err := r.cfg.Fleet.DeviceScheduling()
	if err != nil {
		r.failed(err)
		return
	}
	hubPods, hashes := map[string][]*v1.Pod{}, map[string][32]byte{}
	if r.cfg.Workloads != nil {
		if hubPods, hashes, err = r.hubPodsByDevice(); err != nil {
			r.failed(err)
			return
		}
	}
	r.hubPods = hashes
	known := map[string]bool{}
	for _, d := range devices {
		known[d.ID] = true
		r.storeDevice(d, sched[d.ID], hubPods[d.ID])
	}
	for id := range r.ready {
		if !known[id] {
			r.forget(id)
		}
	}
	r.store.replace(resPods, sourceHub, unboundPods(hubPods, func(d string) bool { return known[d] }))
	r.storeWorkloads()
	r.refreshNamespaces()
}

// refreshDevice re-reads one device: its node, pods and events.
func (r *refresher) refreshDevice(id string) {
	d, err := r.cfg.Fleet.GetDevice(id, r.cfg.Now(), r.cfg.Timeout)
	if errors.Is(err, fleetdb.ErrNotFound) {
		r.forget(id)
		return
	}
	if err != nil {
		r.failed(err)
		return
	}
	sched, err := r.cfg.Fleet.DeviceScheduling()
	if err != nil {
		r.failed(err)
		return
	}
	var hub []*v1.Pod
	if r.cfg.Workloads != nil {
		if hub, err = r.cfg.Workloads.HubPodsOn(id); err != nil {
			return
		}
	}
	r.storeDevice(d, sched[id], hub)
}

// forget drops a device the fleet no longer has.
func (r *refresher) forget(id string) {
	for _, res := range []*resource{resNodes, resLeases, resPods, resEvents, resEventsV1} {
		r.store.replace(res, id, nil)
	}
	delete(r.ready, id)
	delete(r.staleAt, id)
}

// storeDevice stores a device's node, pods (its mirrors and the hub's
// pods bound to it) and events.
func (r *refresher) storeDevice(d fleetdb.Device, sched fleetdb.Scheduling, hub []*v1.Pod) {
	if r.ready == nil {
		r.ready = map[string]bool{}
	}
	r.ready[d.ID] = d.Ready
	r.storeNode(d, sched)
	mirrors, err := r.cfg.Fleet.MirrorPods(d.ID, r.cfg.Now(), r.cfg.Timeout)
	if err != nil {
		r.failed(err)
		return
	}
	pods, hubOnly := withHubPods(mirrors, hub)
	hostIP := ""
	if d.Node != nil {
		for _, a := range d.Node.Addresses {
			if a.Type == v1.NodeInternalIP && hostIP == "" {
				hostIP = a.Address
			}
		}
	}
	objs := make([]*object, 0, len(pods))
	names := map[string]*v1.Pod{}
	for _, p := range pods {
		orig := p.Namespace + "/" + p.Name
		// The scheduler's pods, reported (marked) or not yet, have names
		// unique in the fleet.
		o := podObject(p, d.ID, hubOnly[p] || p.Annotations[fleetdb.AnnotationScheduled] == "true")
		withIPs(o.obj.(*v1.Pod), hostIP)
		names[orig] = o.obj.(*v1.Pod)
		objs = append(objs, o)
	}
	r.store.replace(resPods, d.ID, objs)
	evs, err := r.cfg.Fleet.Events(d.ID)
	if err != nil {
		r.failed(err)
		return
	}
	core := deviceEvents(d.ID, evs, names)
	r.store.replace(resEventsV1, d.ID, eventsV1Objects(core))
	r.store.replace(resEvents, d.ID, core)
}

// storeNode stores a device's node and its lease in kube-node-lease.
func (r *refresher) storeNode(d fleetdb.Device, sched fleetdb.Scheduling) {
	if r.staleAt == nil {
		r.staleAt = map[string]time.Time{}
	}
	if d.Ready {
		r.staleAt[d.ID] = d.LastSeen.Add(r.cfg.Timeout)
	} else {
		delete(r.staleAt, d.ID)
	}
	r.store.replace(resNodes, d.ID, []*object{nodeObject(nodeOf(d, sched, r.cfg.Version, r.cfg.Timeout))})
	r.store.replace(resLeases, d.ID, []*object{leaseObject(d, r.cfg.Timeout)})
}

// leaseObject is a device's node lease as the kubelet keeps it: held by
// the node, made with it (k9s's and kubectl's AGE), renewed when the hub
// last heard from the device.
func leaseObject(d fleetdb.Device, timeout time.Duration) *object {
	yes := true
	holder, seconds := d.ID, int32(timeout/time.Second)
	l := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: d.ID, Namespace: v1.NamespaceNodeLease, UID: uidOf("lease", d.ID),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: d.ID, UID: uidOf("node", d.ID), Controller: &yes}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds}}
	if !d.Created.IsZero() {
		l.CreationTimestamp = metav1.NewTime(d.Created)
	}
	if !d.LastSeen.IsZero() {
		renew := metav1.NewMicroTime(d.LastSeen)
		l.Spec.RenewTime = &renew
	}
	return &object{obj: l, fields: metaFields(l)}
}

// resyncNodes re-reads every node; a device whose readiness changed is
// re-read whole (its pods turn Unknown or come back).
func (r *refresher) resyncNodes() {
	devices, err := r.cfg.Fleet.Devices(r.cfg.Now(), r.cfg.Timeout)
	if err != nil {
		r.failed(err)
		return
	}
	sched, err := r.cfg.Fleet.DeviceScheduling()
	if err != nil {
		r.failed(err)
		return
	}
	for _, d := range devices {
		if was, ok := r.ready[d.ID]; ok && was == d.Ready {
			r.storeNode(d, sched[d.ID])
			continue
		}
		r.refreshDevice(d.ID)
	}
}

// storeWorkloads stores the hub's workloads, PriorityClasses and PDBs.
func (r *refresher) storeWorkloads() {
	if r.cfg.Workloads == nil {
		return
	}
	w, err := r.cfg.Workloads.LoadWorkloads()
	if err != nil {
		r.failed(err)
		return
	}
	r.store.replace(resDeployments, sourceHub, workloadObjects("apps/v1", "Deployment", len(w.Deployments),
		func(i int) kobject { return w.Deployments[i].DeepCopy() }))
	r.store.replace(resDaemonSets, sourceHub, workloadObjects("apps/v1", "DaemonSet", len(w.DaemonSets),
		func(i int) kobject { return w.DaemonSets[i].DeepCopy() }))
	r.store.replace(resStatefulSets, sourceHub, workloadObjects("apps/v1", "StatefulSet", len(w.StatefulSets),
		func(i int) kobject { return w.StatefulSets[i].DeepCopy() }))
	r.store.replace(resPriorityClasses, sourceHub, workloadObjects("scheduling.k8s.io/v1", "PriorityClass", len(w.PriorityClasses),
		func(i int) kobject { return w.PriorityClasses[i].DeepCopy() }))
	r.store.replace(resPDBs, sourceHub, workloadObjects("policy/v1", "PodDisruptionBudget", len(w.PDBs),
		func(i int) kobject { return w.PDBs[i].DeepCopy() }))
}

// workloadObjects stores n objects of a kind, each the copy item(i)
// makes (the store owns it), with its kind and version set as the API
// server sends them.
func workloadObjects(apiVersion, kind string, n int, item func(int) kobject) []*object {
	out := make([]*object, 0, n)
	for i := range n {
		o := item(i)
		o.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
		out = append(out, &object{obj: o, fields: metaFields(o)})
	}
	return out
}

// refreshNamespaces derives the namespaces from the namespaced objects
// stored ("default" always).
func (r *refresher) refreshNamespaces() {
	names := map[string]bool{metav1.NamespaceDefault: true}
	r.store.mu.RLock()
	for res, m := range r.store.objs {
		if !res.namespaced {
			continue
		}
		for _, o := range m {
			names[o.obj.GetNamespace()] = true
		}
	}
	r.store.mu.RUnlock()
	var objs []*object
	for name := range names {
		ns := &v1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: uidOf("namespace", name),
				Labels: map[string]string{"kubernetes.io/metadata.name": name}},
			Spec:   v1.NamespaceSpec{Finalizers: []v1.FinalizerName{v1.FinalizerKubernetes}},
			Status: v1.NamespaceStatus{Phase: v1.NamespaceActive}}
		objs = append(objs, &object{obj: ns, fields: namespaceFields(ns)})
	}
	r.store.replace(resNamespaces, sourceNamespaces, objs)
}

// uidOf is a stable UID for an object the hub derives (a node, a
// namespace): the same across hub restarts.
func uidOf(kind, name string) types.UID {
	h := sha256.Sum256([]byte("podvisor/" + kind + "/" + name))
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// nodeOf is a device as a node: its labels (with the kubelet's hostname,
// os and arch), cordon and taints, and its reported status; a device the
// hub has not heard from within timeout has its conditions Unknown, as
// the node lifecycle controller marks a node whose kubelet went silent.
func nodeOf(d fleetdb.Device, sched fleetdb.Scheduling, version string, timeout time.Duration) *v1.Node {
	n := &v1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: d.ID, UID: uidOf("node", d.ID), Labels: map[string]string{}, CreationTimestamp: metav1.NewTime(d.Created)},
		Spec:       v1.NodeSpec{Unschedulable: sched.Unschedulable, Taints: sched.Taints}}
	for k, v := range d.Labels {
		n.Labels[k] = v
	}
	if d.Node != nil {
		n.Status = *d.Node.DeepCopy()
	}
	info := &n.Status.NodeInfo
	setDefault(n.Labels, v1.LabelHostname, d.ID)
	if info.OperatingSystem != "" {
		setDefault(n.Labels, v1.LabelOSStable, info.OperatingSystem)
	}
	if info.Architecture != "" {
		setDefault(n.Labels, v1.LabelArchStable, info.Architecture)
	}
	if info.KubeletVersion == "" {
		info.KubeletVersion = d.Version
	}
	if d.FencedAt != nil {
		n.Annotations = map[string]string{"podvisor.io/fenced-at": d.FencedAt.UTC().Format(time.RFC3339)}
	}
	if d.Ready {
		return n
	}
	reason, message := "NodeStatusUnknown", "Kubelet stopped posting node status."
	since := metav1.NewTime(d.LastSeen.Add(timeout))
	if d.LastSeen.IsZero() || d.Node == nil {
		reason, message = "NodeStatusNeverUpdated", "Kubelet never posted node status."
		since = metav1.Time{}
	}
	if d.DuplicateID {
		reason, message = "DuplicateDeviceID", "Two installations report under this device ID: "+strings.Join(d.Instances, ", ")
	}
	found := false
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		found = found || c.Type == v1.NodeReady
		c.Status, c.Reason, c.Message, c.LastTransitionTime = v1.ConditionUnknown, reason, message, since
	}
	if !found {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown,
			Reason: reason, Message: message, LastTransitionTime: since})
	}
	return n
}

func setDefault(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// withHubPods adds to a device's mirror pods the hub's pods bound to it
// that it does not report yet, and the hub's owner and deletion of those
// it does (as podhub get pods shows them).
func withHubPods(mirrors []v1.Pod, hub []*v1.Pod) (out []*v1.Pod, hubOnly map[*v1.Pod]bool) {
	out = make([]*v1.Pod, 0, len(mirrors)+len(hub))
	hubOnly = map[*v1.Pod]bool{}
	index := map[string]*v1.Pod{}
	for i := range mirrors {
		out = append(out, &mirrors[i])
		index[mirrors[i].Namespace+"/"+mirrors[i].Name] = &mirrors[i]
	}
	for _, p := range hub {
		if m, ok := index[p.Namespace+"/"+p.Name]; ok {
			m.OwnerReferences = p.OwnerReferences
			if p.DeletionTimestamp != nil {
				m.DeletionTimestamp = p.DeletionTimestamp
				if p.Status.Reason == "NodeLost" {
					m.Status.Reason = "NodeLost"
				}
			}
			continue
		}
		only := hubPodOnly(p)
		hubOnly[only] = true
		out = append(out, only)
	}
	return out, hubOnly
}

// withIPs fills what the kubelet fills and a device may leave out: the
// host's IP (its node's internal address) and podIPs from podIP.
func withIPs(p *v1.Pod, hostIP string) {
	if p.Status.HostIP == "" && hostIP != "" && p.Status.Phase != v1.PodPending {
		p.Status.HostIP = hostIP
	}
	if p.Status.HostIP != "" && len(p.Status.HostIPs) == 0 {
		p.Status.HostIPs = []v1.HostIP{{IP: p.Status.HostIP}}
	}
	if p.Status.PodIP != "" && len(p.Status.PodIPs) == 0 {
		p.Status.PodIPs = []v1.PodIP{{IP: p.Status.PodIP}}
	}
}

// hubPodOnly is a hub pod no device reports: Pending until one does.
func hubPodOnly(p *v1.Pod) *v1.Pod {
	cp := p.DeepCopy()
	if cp.Annotations == nil {
		cp.Annotations = map[string]string{}
	}
	if cp.Spec.NodeName != "" {
		cp.Annotations[fleetdb.AnnotationDevice] = cp.Spec.NodeName
	}
	if cp.Status.Phase == "" {
		cp.Status.Phase = v1.PodPending
	}
	return cp
}

// podObject presents a pod as the API server would: a device's manifest
// file pod as the kubelet's mirror pod, named <name>-<device>, owned by
// its node; the hub's pods keep their names.
func podObject(p *v1.Pod, device string, scheduled bool) *object {
	p = p.DeepCopy()
	p.Kind, p.APIVersion = "Pod", "v1"
	orig := p.Name
	// Only the hub's scheduler makes names unique across the fleet; any
	// other pod is a device's own (its manifest files', or applied to it
	// with podhub apply --device), and two devices may run one of the same
	// name: it is shown as the kubelet shows a static pod, its mirror pod
	// named after the node, its source "file" or, from the hub, "http"
	// (the kubelet's static pods from a manifest URL).
	if device != "" && !scheduled {
		p.Name = orig + "-" + device
		hash := p.Annotations[manifest.AnnotationHash]
		if hash == "" {
			hash = string(p.UID)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		source := "file"
		if p.Annotations[manifest.AnnotationSource] == manifest.SourceHub {
			source = "http"
		}
		p.Annotations[annotationConfigMirror] = hash
		p.Annotations[annotationConfigHash] = hash
		p.Annotations[annotationConfigSource] = source
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: device, UID: uidOf("node", device), Controller: &yes}}
	}
	return &object{obj: p, fields: podFields(p), device: p.Spec.NodeName, origName: orig}
}

// deviceEvents are a device's events as core/v1 Events, from its kubelet:
// a pod's under the pod's presented name and UID (a mirror pod's: its
// static pod's, the config hash, as the kubelet reports them), the
// device's own (rejections) about its node.
func deviceEvents(device string, evs []fleetdb.DeviceEvent, pods map[string]*v1.Pod) []*object {
	out := make([]*object, 0, len(evs))
	names := map[string]bool{}
	for _, e := range evs {
		ev := &v1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
			Type: e.Type, Reason: e.Reason, Message: e.Message, Count: 1,
			FirstTimestamp: metav1.NewTime(e.Time), LastTimestamp: metav1.NewTime(e.Time),
			Source:              v1.EventSource{Component: "kubelet", Host: device},
			ReportingController: "kubelet", ReportingInstance: device}
		if ns, name, ok := strings.Cut(e.Pod, "/"); ok {
			ref := v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name}
			if p := pods[e.Pod]; p != nil {
				ref.Name, ref.UID = p.Name, p.UID
				// A mirror pod's events are about its static pod, whose UID
				// is the config hash the mirror pod carries: kubectl describe
				// (and k9s's) asks for involvedObject.uid=<config.mirror>.
				if m := p.Annotations[annotationConfigMirror]; m != "" {
					ref.UID = types.UID(m)
				}
			}
			ev.InvolvedObject, ev.Namespace = ref, ns
		} else {
			// The kubelet's node events: the node's name as its UID.
			ev.InvolvedObject = v1.ObjectReference{Kind: "Node", Name: device, UID: types.UID(device)}
			ev.Namespace = metav1.NamespaceDefault
		}
		// The kubelet names an event <object>.<time in hex nanoseconds>.
		nanos := e.Time.UnixNano()
		for {
			ev.Name = fmt.Sprintf("%s.%x", ev.InvolvedObject.Name, nanos)
			if !names[ev.Namespace+"/"+ev.Name] {
				break
			}
			nanos++
		}
		names[ev.Namespace+"/"+ev.Name] = true
		ev.UID = uidOf("event", device+"/"+ev.Namespace+"/"+ev.Name)
		ev.CreationTimestamp = ev.FirstTimestamp
		out = append(out, &object{obj: ev, fields: eventFields(ev)})
	}
	return out
}
