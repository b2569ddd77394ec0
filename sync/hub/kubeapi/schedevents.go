package kubeapi

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// kindResources are the kinds whose hub events (the scheduler's and the
// workload controllers', workloaddb's sched_events) a described object
// shows.
var kindResources = map[string]*resource{"Pod": resPods, "Deployment": resDeployments, "DaemonSet": resDaemonSets,
	"StatefulSet": resStatefulSets, "PodDisruptionBudget": resPDBs}

// hubEvents are the hub's own events about the one object a field
// selector names (kubectl describe asks with involvedObject.kind, .name
// and .namespace): read when asked, not kept, so a watch does not see
// them. A hub pod's events are kept under its name at the hub, which a
// mirror pod's presented name leads back to.
func (s *Server) hubEvents(fs fields.Selector, namespace string) []*object {
	if s.cfg.Workloads == nil || fs == nil {
		return nil
	}
	kind, _ := fs.RequiresExactMatch("involvedObject.kind")
	name, ok := fs.RequiresExactMatch("involvedObject.name")
	if !ok {
		return nil
	}
	ns, ok := fs.RequiresExactMatch("involvedObject.namespace")
	if !ok {
		ns = namespace
	}
	if kind == "" {
		kind = "Pod"
	}
	res := kindResources[kind]
	if res == nil || ns == "" {
		return nil
	}
	target := s.store.get(res, ns, name)
	if target == nil {
		return nil
	}
	stored := name
	if res == resPods {
		stored = target.origName
	}
	evs, err := s.cfg.Workloads.ObjectEvents(kind, ns, stored)
	if err != nil {
		return nil
	}
	rv := fmt.Sprint(s.store.current())
	var out []*object
	for i, e := range evs {
		ev := &v1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", name, e.First.UnixNano()+int64(i)), Namespace: ns,
				ResourceVersion: rv, CreationTimestamp: metav1.NewTime(e.First)},
			InvolvedObject: v1.ObjectReference{Kind: kind, APIVersion: res.apiVersion(), Namespace: ns, Name: name, UID: target.obj.GetUID()},
			Type:           e.Type, Reason: e.Reason, Message: e.Message, Count: int32(e.Count),
			FirstTimestamp: metav1.NewTime(e.First), LastTimestamp: metav1.NewTime(e.Last),
			Source: v1.EventSource{Component: "podhub"}, ReportingController: "podhub"}
		ev.UID = uidOf("hub-event", ns+"/"+ev.Name)
		o := &object{res: resEvents, obj: ev, fields: eventFields(ev), key: keyOf(ns, ev.Name)}
		if fs.Matches(o.fields) {
			o.raw, _ = jsonOf(ev)
			out = append(out, o)
		}
	}
	return out
}
