package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/podvisor/podvisor/pod/podrow"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// DeviceRow is a device in the devices page's table.
type DeviceRow struct {
	ID string `json:"id"`
	// Status is podhub get devices' STATUS: Ready, NotReady or
	// DuplicateID, with ",SchedulingDisabled" when cordoned (as kubectl
	// shows a cordoned node) and ",Fenced" when fenced.
	Status   string            `json:"status"`
	Ready    bool              `json:"ready"`
	Online   bool              `json:"online"`
	Version  string            `json:"version"`
	Labels   map[string]string `json:"labels"`
	Pods     int               `json:"pods"`
	LastSeen *time.Time        `json:"lastSeen,omitempty"`
	// Seen is how long ago the device was last heard from, as kubectl
	// prints an age ("<never>" before its first message).
	Seen string `json:"seen"`
	// Generation is the desired document's, ObservedGeneration the one
	// the device applied: they differ while a change is on its way.
	Generation         int64 `json:"generation"`
	ObservedGeneration int64 `json:"observedGeneration"`
	// Update is the device's newest update report in one line, "" before
	// its first.
	Update string `json:"update,omitempty"`
}

// DevicesView is the devices page: every device, and the label keys it
// may be grouped by.
type DevicesView struct {
	Devices   []DeviceRow `json:"devices"`
	LabelKeys []string    `json:"labelKeys"`
}

// PodRow is a pod in a table, with kubectl's columns (pod/podrow).
type PodRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Device    string `json:"device"`
	Ready     string `json:"ready"`
	Status    string `json:"status"`
	Restarts  string `json:"restarts"`
	Age       string `json:"age"`
	Phase     string `json:"phase"`
	IP        string `json:"ip,omitempty"`
	// Owner is the controller's kind/name, "" for a pod of its own.
	Owner string `json:"owner,omitempty"`
	// Source is where the pod came from: file (the device's manifests
	// directory) or hub.
	Source string `json:"source,omitempty"`
}

// PodsView is the pods page: the pods the filters chose (at most
// MaxPodRows), how many matched of how many (the fleet's pods, or the
// chosen device's), and the values each filter offers.
type PodsView struct {
	Pods       []PodRow `json:"pods"`
	Matched    int      `json:"matched"`
	Total      int      `json:"total"`
	Truncated  bool     `json:"truncated"`
	Namespaces []string `json:"namespaces"`
	Phases     []string `json:"phases"`
	Devices    []string `json:"devices"`
}

// MaxPodRows bounds the rows of one pods answer: a page shows no more,
// and says how many more the filters match.
const MaxPodRows = 2000

// maxEvents bounds the events of the device page, newest kept.
const maxEvents = 100

// EventRow is an event of a device or one of its pods.
type EventRow struct {
	Time    time.Time `json:"time"`
	Age     string    `json:"age"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	// Pod is the namespace/name of the pod it is about, "" for the
	// device's own.
	Pod string `json:"pod,omitempty"`
}

// ConditionRow is a node condition of the device.
type ConditionRow struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Since   string `json:"since,omitempty"`
}

// DeviceView is one device's page.
type DeviceView struct {
	Device      DeviceRow                 `json:"device"`
	Pods        []PodRow                  `json:"pods"`
	Events      []EventRow                `json:"events"`
	Conditions  []ConditionRow            `json:"conditions"`
	Capacity    map[string]string         `json:"capacity,omitempty"`
	Allocatable map[string]string         `json:"allocatable,omitempty"`
	System      map[string]string         `json:"system,omitempty"`
	Taints      []string                  `json:"taints,omitempty"`
	Metrics     *protocol.MetricsSnapshot `json:"metrics,omitempty"`
	UpdateState *protocol.UpdateState     `json:"updateState,omitempty"`
	// Instances are the two installations reporting under the ID, when
	// there are two.
	Instances []string `json:"instances,omitempty"`
	// AckError is the device's refusal of its desired document, if any.
	AckError string `json:"ackError,omitempty"`
}

// WorkloadRow is a workload with its rollout's progress.
type WorkloadRow struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Desired, Updated, Ready and Available are kubectl's DESIRED (or
	// the replicas asked for), UP-TO-DATE, READY and AVAILABLE.
	Desired   int32 `json:"desired"`
	Updated   int32 `json:"updated"`
	Ready     int32 `json:"ready"`
	Available int32 `json:"available"`
	Paused    bool  `json:"paused,omitempty"`
	// Halted is why the failure threshold halted the rollout, "" when it
	// is not.
	Halted string `json:"halted,omitempty"`
	// Progress is the rollout's newest word (the Progressing
	// condition's message), Age the workload's.
	Progress string `json:"progress,omitempty"`
	Age      string `json:"age"`
}

// WorkloadsView is the workloads page.
type WorkloadsView struct {
	Workloads []WorkloadRow `json:"workloads"`
}

func (d *dashboard) deviceRow(dev fleetdb.Device, sched fleetdb.Scheduling, now time.Time) DeviceRow {
	row := DeviceRow{ID: dev.ID, Ready: dev.Ready, Online: dev.Online, Version: dev.Version, Labels: dev.Labels, Pods: dev.Pods,
		Seen: ago(now, dev.LastSeen), Generation: dev.Generation, ObservedGeneration: dev.ObservedGeneration}
	if row.Labels == nil {
		row.Labels = map[string]string{}
	}
	if !dev.LastSeen.IsZero() {
		t := dev.LastSeen
		row.LastSeen = &t
	}
	switch {
	case dev.DuplicateID:
		row.Status = "DuplicateID"
	case dev.Ready:
		row.Status = "Ready"
	default:
		row.Status = "NotReady"
	}
	if sched.Unschedulable {
		row.Status += ",SchedulingDisabled"
	}
	if dev.FencedAt != nil {
		row.Status += ",Fenced"
	}
	if u := dev.Update; u != nil {
		row.Update = strings.TrimSpace(fmt.Sprintf("%s %s %s %d%%", u.Kind, u.Version, u.Phase, u.Percent))
	}
	return row
}

func (d *dashboard) devices(*http.Request) (any, int, error) {
	now := d.cfg.Now()
	devs, err := d.cfg.Fleet.Devices(now, d.cfg.Timeout)
	if err != nil {
		return nil, 0, err
	}
	sched, err := d.cfg.Fleet.DeviceScheduling()
	if err != nil {
		return nil, 0, err
	}
	out := DevicesView{Devices: make([]DeviceRow, 0, len(devs)), LabelKeys: []string{}}
	keys := map[string]bool{}
	for _, dev := range devs {
		out.Devices = append(out.Devices, d.deviceRow(dev, sched[dev.ID], now))
		for k := range dev.Labels {
			keys[k] = true
		}
	}
	out.LabelKeys = sortedKeys(keys)
	return out, 0, nil
}

func (d *dashboard) device(r *http.Request) (any, int, error) {
	id := r.PathValue("id")
	if err := protocol.ValidDeviceID(id); err != nil {
		return nil, http.StatusBadRequest, err
	}
	now := d.cfg.Now()
	dev, err := d.cfg.Fleet.GetDevice(id, now, d.cfg.Timeout)
	if errors.Is(err, fleetdb.ErrNotFound) {
		return nil, http.StatusNotFound, fmt.Errorf("device %q not found", id)
	}
	if err != nil {
		return nil, 0, err
	}
	sched, err := d.cfg.Fleet.DeviceScheduling()
	if err != nil {
		return nil, 0, err
	}
	view := DeviceView{Device: d.deviceRow(dev, sched[id], now), Metrics: dev.Metrics, UpdateState: dev.Update,
		Instances: dev.Instances, Pods: []PodRow{}, Events: []EventRow{}, Conditions: []ConditionRow{}}
	for _, t := range sched[id].Taints {
		view.Taints = append(view.Taints, t.ToString())
	}
	if n := dev.Node; n != nil {
		for _, c := range n.Conditions {
			row := ConditionRow{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message}
			if !c.LastTransitionTime.IsZero() {
				row.Since = ago(now, c.LastTransitionTime.Time)
			}
			view.Conditions = append(view.Conditions, row)
		}
		view.Capacity, view.Allocatable = quantities(n.Capacity), quantities(n.Allocatable)
		i := n.NodeInfo
		view.System = map[string]string{}
		for k, v := range map[string]string{"osImage": i.OSImage, "kernelVersion": i.KernelVersion, "architecture": i.Architecture,
			"operatingSystem": i.OperatingSystem, "containerRuntimeVersion": i.ContainerRuntimeVersion, "kubeletVersion": i.KubeletVersion,
			"bootID": i.BootID, "machineID": i.MachineID} {
			if v != "" {
				view.System[k] = v
			}
		}
	}
	pods, err := d.allPods(id, now)
	if err != nil {
		return nil, 0, err
	}
	for i := range pods {
		view.Pods = append(view.Pods, podRowOf(&pods[i], now))
	}
	events, err := d.cfg.Fleet.Events(id)
	if err != nil {
		return nil, 0, err
	}
	if len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	for i := len(events) - 1; i >= 0; i-- { // newest first
		e := events[i]
		view.Events = append(view.Events, EventRow{Time: e.Time, Age: ago(now, e.Time), Type: e.Type, Reason: e.Reason, Message: e.Message, Pod: e.Pod})
	}
	if ack, err := d.cfg.Fleet.LastAck(id); err == nil && ack != nil {
		view.AckError = ack.Error
	}
	return view, 0, nil
}

func (d *dashboard) pods(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	ns, phase, device, text := q.Get("namespace"), q.Get("phase"), q.Get("device"), strings.ToLower(q.Get("q"))
	if device != "" {
		if err := protocol.ValidDeviceID(device); err != nil {
			return nil, http.StatusBadRequest, err
		}
	}
	now := d.cfg.Now()
	// One device's pods are read alone; the filters' choices then are
	// that device's, with every device still offered.
	pods, err := d.podsOf(device, now)
	if err != nil {
		return nil, 0, err
	}
	out := PodsView{Pods: []PodRow{}, Total: len(pods)}
	namespaces, phases, devices := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		namespaces[p.Namespace], phases[string(p.Status.Phase)], devices[p.Spec.NodeName] = true, true, true
		if (ns != "" && p.Namespace != ns) || (phase != "" && string(p.Status.Phase) != phase) || (device != "" && p.Spec.NodeName != device) {
			continue
		}
		row := podRowOf(p, now)
		if text != "" && !matches(text, row) {
			continue
		}
		out.Matched++
		if len(out.Pods) < MaxPodRows {
			out.Pods = append(out.Pods, row)
		}
	}
	out.Truncated = out.Matched > len(out.Pods)
	if device != "" {
		ids, err := d.cfg.Fleet.Select(nil)
		if err != nil {
			return nil, 0, err
		}
		for _, id := range ids {
			devices[id] = true
		}
	}
	out.Namespaces, out.Phases, out.Devices = sortedKeys(namespaces), sortedKeys(phases), sortedKeys(devices)
	return out, 0, nil
}

// matches: the text is in the pod's name, namespace, device, status or
// owner.
func matches(text string, r PodRow) bool {
	for _, s := range []string{r.Name, r.Namespace, r.Device, r.Status, r.Owner, r.Namespace + "/" + r.Name} {
		if strings.Contains(strings.ToLower(s), text) {
			return true
		}
	}
	return false
}

// podsOf is the pods of one device ("" for every device): the whole
// fleet's from memory when the dashboard has them (Config.Pods).
func (d *dashboard) podsOf(device string, now time.Time) ([]*v1.Pod, error) {
	if device == "" && d.cfg.Pods != nil {
		return d.cfg.Pods(), nil
	}
	pods, err := d.allPods(device, now)
	out := make([]*v1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out, err
}

// allPods are the mirror pods of one device ("" for every device) with
// the hub's pods no device reports yet (Pending until one does).
func (d *dashboard) allPods(device string, now time.Time) ([]v1.Pod, error) {
	pods, err := d.cfg.Fleet.MirrorPods(device, now, d.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	if d.cfg.Workloads == nil {
		return pods, nil
	}
	var hub []*v1.Pod
	if device == "" {
		hub, err = d.cfg.Workloads.HubPods()
	} else {
		hub, err = d.cfg.Workloads.HubPodsOn(device)
	}
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i := range pods {
		index[pods[i].Spec.NodeName+"|"+pods[i].Namespace+"/"+pods[i].Name] = i
	}
	for _, p := range hub {
		if i, ok := index[p.Spec.NodeName+"|"+p.Namespace+"/"+p.Name]; ok {
			// The device's report, with what only the hub knows.
			pods[i].OwnerReferences = p.OwnerReferences
			if p.DeletionTimestamp != nil {
				pods[i].DeletionTimestamp = p.DeletionTimestamp
			}
			continue
		}
		cp := *p
		if cp.Status.Phase == "" {
			cp.Status.Phase = v1.PodPending
		}
		pods = append(pods, cp)
	}
	return pods, nil
}

func podRowOf(p *v1.Pod, now time.Time) PodRow {
	c := podrow.Of(p, now)
	row := PodRow{Namespace: p.Namespace, Name: p.Name, Device: p.Spec.NodeName, Ready: c.Ready, Status: c.Status, Restarts: c.Restarts,
		Age: c.Age, Phase: string(p.Status.Phase), IP: p.Status.PodIP, Source: p.Annotations["podvisor.io/source"]}
	if p.CreationTimestamp.IsZero() {
		row.Age = "<unknown>"
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			row.Owner = o.Kind + "/" + o.Name
		}
	}
	return row
}

func (d *dashboard) workloads(*http.Request) (any, int, error) {
	out := WorkloadsView{Workloads: []WorkloadRow{}}
	if d.cfg.Workloads == nil {
		return out, 0, nil
	}
	w, err := d.cfg.Workloads.LoadWorkloads()
	if err != nil {
		return nil, 0, err
	}
	now := d.cfg.Now()
	for _, o := range w.Deployments {
		s := o.Status
		row := WorkloadRow{Kind: workloaddb.KindDeployment, Namespace: o.Namespace, Name: o.Name, Desired: replicas(o.Spec.Replicas),
			Updated: s.UpdatedReplicas, Ready: s.ReadyReplicas, Available: s.AvailableReplicas, Paused: o.Spec.Paused, Age: age(now, o.CreationTimestamp.Time)}
		for _, c := range s.Conditions {
			if c.Type == appsv1.DeploymentProgressing {
				row.Progress = c.Message
				if c.Reason == reasonRolloutHalted {
					row.Halted = c.Message
				}
			}
		}
		out.Workloads = append(out.Workloads, row)
	}
	for _, o := range w.DaemonSets {
		s := o.Status
		row := WorkloadRow{Kind: workloaddb.KindDaemonSet, Namespace: o.Namespace, Name: o.Name, Desired: s.DesiredNumberScheduled,
			Updated: s.UpdatedNumberScheduled, Ready: s.NumberReady, Available: s.NumberAvailable, Age: age(now, o.CreationTimestamp.Time)}
		for _, c := range s.Conditions {
			if c.Reason == reasonRolloutHalted && c.Status == v1.ConditionTrue {
				row.Halted = c.Message
			}
		}
		out.Workloads = append(out.Workloads, row)
	}
	for _, o := range w.StatefulSets {
		s := o.Status
		row := WorkloadRow{Kind: workloaddb.KindStatefulSet, Namespace: o.Namespace, Name: o.Name, Desired: replicas(o.Spec.Replicas),
			Updated: s.UpdatedReplicas, Ready: s.ReadyReplicas, Available: s.AvailableReplicas, Age: age(now, o.CreationTimestamp.Time)}
		for _, c := range s.Conditions {
			if c.Reason == reasonRolloutHalted && c.Status == v1.ConditionTrue {
				row.Halted = c.Message
			}
		}
		out.Workloads = append(out.Workloads, row)
	}
	return out, 0, nil
}

// reasonRolloutHalted is the reason of the condition the hub's
// controllers set when the failure threshold halts a rollout
// (sync/hub/schedule/workloads.ReasonRolloutHalted; the hub's packages
// import no controller for a word).
const reasonRolloutHalted = "RolloutHalted"

// replicas is a replica count as the API server defaults it (1).
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

func quantities(l v1.ResourceList) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, q := range l {
		out[string(k)] = q.String()
	}
	return out
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "<never>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
