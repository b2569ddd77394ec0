package api

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// ObjectsRequest is a file of objects for the scheduler (apply -f
// without --device or --selector): the hub decodes it with kinds.Decode.
type ObjectsRequest struct {
	File string `json:"file"`
	Data []byte `json:"data"`
}

// ObjectsApplied counts what an apply stored.
type ObjectsApplied struct {
	Pods            int `json:"pods"`
	Deployments     int `json:"deployments"`
	DaemonSets      int `json:"daemonSets"`
	StatefulSets    int `json:"statefulSets"`
	PriorityClasses int `json:"priorityClasses"`
	PDBs            int `json:"podDisruptionBudgets"`
	ConfigMaps      int `json:"configMaps"`
	Secrets         int `json:"secrets"`
}

// CordonRequest cordons (true) or uncordons a device.
type CordonRequest struct {
	Unschedulable bool `json:"unschedulable"`
}

// FenceRequest fences a device (its pods are known not to run), or lifts
// its fence (Remove) once the device has applied it and stopped them.
type FenceRequest struct {
	Remove bool `json:"remove,omitempty"`
}

// TaintRequest adds an operator taint to a device, or removes it.
type TaintRequest struct {
	Taint  v1.Taint `json:"taint"`
	Remove bool     `json:"remove,omitempty"`
}

// workloadKinds maps the API's path names to stored kinds.
var workloadKinds = map[string]string{
	"deployments": workloaddb.KindDeployment, "daemonsets": workloaddb.KindDaemonSet, "priorityclasses": workloaddb.KindPriorityClass,
	"statefulsets":         workloaddb.KindStatefulSet,
	"poddisruptionbudgets": workloaddb.KindPDB,
}

func (a *API) workloadRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/objects", func(w http.ResponseWriter, r *http.Request) {
		var req ObjectsRequest
		// A file of up to manifest.MaxFileSize travels base64-encoded.
		if err := decodeBodyUpTo(r, &req, manifest.MaxFileSize/3*4+1<<20); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := a.applyObjects(req)
		reply(w, out, err)
	})
	mux.HandleFunc("GET /v1/workloads/{kind}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := workloadKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		list, err := a.listWorkloads(kind)
		reply(w, list, err)
	})
	mux.HandleFunc("GET /v1/workloads/{kind}/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := workloadKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		d, err := a.Workloads.WorkloadDetail(kind, r.PathValue("namespace"), r.PathValue("name"))
		reply(w, d, err)
	})
	mux.HandleFunc("DELETE /v1/workloads/{kind}/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := workloadKind(r.PathValue("kind"))
		if err == nil {
			err = a.Workloads.DeleteWorkload(kind, r.PathValue("namespace"), r.PathValue("name"))
		}
		a.rescheduled(w, err)
	})
	mux.HandleFunc("DELETE /v1/pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.rescheduled(w, a.Scheduler.DeletePod(types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}, time.Now()))
	})
	a.rolloutRoutes(mux)
	mux.HandleFunc("PUT /v1/devices/{id}/cordon", deviceChange(a, func(id string, req CordonRequest) error {
		return a.Fleet.SetCordon(id, req.Unschedulable)
	}))
	mux.HandleFunc("PUT /v1/devices/{id}/fence", func(w http.ResponseWriter, r *http.Request) {
		var req FenceRequest
		err := decodeBody(r, &req)
		var gen int64
		if err == nil && req.Remove {
			gen, err = a.Link.Unfence(r.PathValue("id"))
		} else if err == nil {
			gen, err = a.Link.Fence(r.PathValue("id"))
		}
		a.Scheduler.Reschedule()
		reply(w, Applied{Device: r.PathValue("id"), Generation: gen}, err)
	})
	mux.HandleFunc("PUT /v1/devices/{id}/taints", deviceChange(a, func(id string, req TaintRequest) error {
		return a.Fleet.SetTaint(id, req.Taint, req.Remove, time.Now())
	}))
}

// rescheduled replies to a request that changed what the scheduler reads
// (err: whether it did), once a pass is asked for.
func (a *API) rescheduled(w http.ResponseWriter, err error) {
	a.Scheduler.Reschedule()
	reply(w, map[string]string{}, err)
}

// deviceChange handles a PUT that changes how a device is scheduled: set
// applies the request body, decoded as a Req, to the device {id}.
func deviceChange[Req any](a *API, set func(id string, req Req) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		err := decodeBody(r, &req)
		if err == nil {
			err = set(r.PathValue("id"), req)
		}
		a.rescheduled(w, err)
	}
}

func workloadKind(name string) (string, error) {
	if k, ok := workloadKinds[name]; ok {
		return k, nil
	}
	return "", fmt.Errorf("unknown kind %q (deployments, daemonsets, statefulsets, priorityclasses, poddisruptionbudgets): %w", name, fleetdb.ErrNotFound)
}

// applyObjects decodes a file strictly, all or nothing, and stores it for
// the scheduler, which runs at once.
func (a *API) applyObjects(req ObjectsRequest) (ObjectsApplied, error) {
	if req.File == "" {
		req.File = "<request>"
	}
	objs, err := kinds.Decode(req.File, req.Data)
	if err != nil {
		return ObjectsApplied{}, err
	}
	for _, p := range objs.Pods {
		// A bare pod must be one a device accepts as it is.
		manifest.SetDefaults(p)
		if errs := manifest.Validate(p); len(errs) > 0 {
			return ObjectsApplied{}, fmt.Errorf("%s: %w", objs.Where("Pod", p.Namespace, p.Name), errs.ToAggregate())
		}
	}
	// One transaction for the whole file: the workloads' part and the
	// ConfigMaps' and Secrets'.
	now := time.Now()
	if err := a.Objects.Apply(objs, now, func(tx *sql.Tx) error { return a.Workloads.ApplyObjectsTx(tx, objs, now) }); err != nil {
		return ObjectsApplied{}, err
	}
	a.Scheduler.Reschedule()
	return ObjectsApplied{Pods: len(objs.Pods), Deployments: len(objs.Deployments), DaemonSets: len(objs.DaemonSets),
		StatefulSets: len(objs.StatefulSets), PriorityClasses: len(objs.PriorityClasses), PDBs: len(objs.PDBs),
		ConfigMaps: len(objs.ConfigMaps), Secrets: len(objs.Secrets)}, nil
}

// listWorkloads returns the stored objects of a kind, as the API server's
// list: a workload with the status its controller last stored (its pods'
// readiness as their devices report it) and a Deployment's revision.
func (a *API) listWorkloads(kind string) ([]json.RawMessage, error) {
	w, err := a.Workloads.LoadWorkloads()
	if err != nil {
		return nil, err
	}
	revs, err := a.Workloads.CurrentRevisions()
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	add := func(v any) { raw, _ := json.Marshal(v); out = append(out, raw) }
	switch kind {
	case workloaddb.KindDeployment:
		for _, d := range w.Deployments {
			workloaddb.WithRevision(d, revs[workloaddb.WorkloadKey{Kind: kind, Namespace: d.Namespace, Name: d.Name}])
			d.Kind, d.APIVersion = workloaddb.KindDeployment, "apps/v1"
			add(d)
		}
	case workloaddb.KindDaemonSet:
		for _, d := range w.DaemonSets {
			d.Kind, d.APIVersion = workloaddb.KindDaemonSet, "apps/v1"
			add(d)
		}
	case workloaddb.KindStatefulSet:
		for _, st := range w.StatefulSets {
			st.Kind, st.APIVersion = workloaddb.KindStatefulSet, "apps/v1"
			add(st)
		}
	case workloaddb.KindPDB:
		for _, pdb := range w.PDBs {
			pdb.Kind, pdb.APIVersion = workloaddb.KindPDB, "policy/v1"
			add(pdb)
		}
	case workloaddb.KindPriorityClass:
		for _, pc := range w.PriorityClasses {
			pc.Kind, pc.APIVersion = workloaddb.KindPriorityClass, "scheduling.k8s.io/v1"
			add(pc)
		}
	}
	return out, nil
}

// withHubPods adds to the devices' mirror pods what only the hub knows:
// its pods no device reports (pending, not yet started, or terminating on
// a lost device), and the deletion of mirrored pods it is terminating.
func (a *API) withHubPods(mirrors []v1.Pod, device string) ([]v1.Pod, error) {
	pods, err := a.Workloads.HubPods()
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i := range mirrors {
		index[mirrors[i].Spec.NodeName+"|"+mirrors[i].Namespace+"/"+mirrors[i].Name] = i
	}
	for _, p := range pods {
		if device != "" && p.Spec.NodeName != device {
			continue
		}
		if i, ok := index[p.Spec.NodeName+"|"+p.Namespace+"/"+p.Name]; ok {
			m := &mirrors[i]
			m.OwnerReferences = p.OwnerReferences
			if p.DeletionTimestamp != nil {
				m.DeletionTimestamp = p.DeletionTimestamp
				if p.Status.Reason == "NodeLost" {
					m.Status.Reason = "NodeLost"
				}
			}
			withDisruptionTarget(m, p)
			continue
		}
		cp := *p
		if cp.Annotations == nil {
			cp.Annotations = map[string]string{}
		}
		cp.Annotations[fleetdb.AnnotationDevice] = p.Spec.NodeName
		if cp.Status.Phase == "" {
			cp.Status.Phase = v1.PodPending
		}
		mirrors = append(mirrors, cp)
	}
	return mirrors, nil
}

// withDisruptionTarget gives a mirror pod the DisruptionTarget condition
// of whoever disrupted it: its device, which stopped it as the kubelet
// does (TerminationByKubelet: a node-pressure eviction, a preemption
// for a critical pod, a shutdown; the condition's message is the
// pod's), or else the hub (the hub pod's condition). A condition the
// device reported itself stays.
func withDisruptionTarget(m, hub *v1.Pod) {
	for _, c := range m.Status.Conditions {
		if c.Type == v1.DisruptionTarget {
			return
		}
	}
	if kubeletDisrupted(m) {
		t := metav1.Now()
		for _, c := range m.Status.Conditions {
			if c.Type == v1.PodReady {
				t = c.LastTransitionTime
			}
		}
		m.Status.Conditions = append(m.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
			Reason: v1.PodReasonTerminationByKubelet, Message: m.Status.Message, LastTransitionTime: t})
		return
	}
	for _, c := range hub.Status.Conditions {
		if c.Type == v1.DisruptionTarget {
			m.Status.Conditions = append(m.Status.Conditions, c)
		}
	}
}

// kubeletDisrupted: the device failed a pod that ran, as the kubelet's
// eviction manager (Evicted), critical-pod preemption (Preempting) or
// graceful shutdown (Terminated) does; an admission refusal (Evicted
// for a condition the node had) is no disruption of a running pod.
func kubeletDisrupted(m *v1.Pod) bool {
	if m.Status.Phase != v1.PodFailed {
		return false
	}
	switch m.Status.Reason {
	case "Evicted":
		return !strings.HasPrefix(m.Status.Message, "The node had condition:")
	case "Preempting", "Terminated":
		return true
	}
	return false
}
