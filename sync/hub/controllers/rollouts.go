package controllers

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/schedule"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// observed is what the devices report of the hub's bound pods, from the
// mirrors' summary columns (one query, no pod decoded): a report counts
// only from the device the pod is bound to.
func (s *Scheduler) observed(pods []*v1.Pod) (map[types.NamespacedName]workloads.Observed, error) {
	sums, err := s.fleet.ScheduledSummaries()
	if err != nil {
		return nil, err
	}
	bound := make(map[types.NamespacedName]string, len(pods))
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p.Spec.NodeName
		}
	}
	out := make(map[types.NamespacedName]workloads.Observed, len(sums))
	for _, m := range sums {
		if bound[m.Key] != m.Device {
			continue
		}
		out[m.Key] = workloads.Observed{Reported: true, Phase: m.Phase, Ready: m.Ready, ReadySince: m.ReadySince,
			Restarts: m.Restarts, Failure: m.Failure}
	}
	return out, nil
}

// revisions are the workloads' stored revisions, as the pass reads them.
func (s *Scheduler) revisions() (map[string][]workloads.Revision, error) {
	stored, err := s.workloads.Revisions()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]workloads.Revision, len(stored))
	for k, revs := range stored {
		list := make([]workloads.Revision, len(revs))
		for i, r := range revs {
			list[i] = workloads.Revision{Number: r.Number, Hash: r.Hash, ChangeCause: r.ChangeCause, Halted: r.Halted, NoTemplate: r.NoTemplate}
			if r.Template != nil {
				// A StatefulSet's: its current revision's pods are made
				// again from it.
				t := &v1.PodTemplateSpec{}
				if err := json.Unmarshal(r.Template, t); err != nil {
					return nil, fmt.Errorf("stored revision %d of %s %s/%s: %w", r.Number, k.Kind, k.Namespace, k.Name, err)
				}
				list[i].Kept = t
			}
		}
		out[workloads.Index(k.Kind, k.Namespace, k.Name)] = list
	}
	return out, nil
}

// rolloutWrites are the statuses that changed since stored (each
// compared as JSON: condition times are kept to the second) and the
// revision sets the pass changed.
func rolloutWrites(w workloaddb.Workloads, plan schedule.Plan) workloaddb.PodWrites {
	stored := map[string][]byte{}
	for _, d := range w.Deployments {
		stored[workloads.Index(workloaddb.KindDeployment, d.Namespace, d.Name)], _ = json.Marshal(d.Status)
	}
	for _, d := range w.DaemonSets {
		stored[workloads.Index(workloaddb.KindDaemonSet, d.Namespace, d.Name)], _ = json.Marshal(d.Status)
	}
	for _, s := range w.StatefulSets {
		stored[workloads.Index(workloaddb.KindStatefulSet, s.Namespace, s.Name)], _ = json.Marshal(s.Status)
	}
	var out workloaddb.PodWrites
	for _, st := range plan.Statuses {
		var raw []byte
		switch {
		case st.Deployment != nil:
			raw, _ = json.Marshal(st.Deployment)
		case st.StatefulSet != nil:
			raw, _ = json.Marshal(st.StatefulSet)
		default:
			raw, _ = json.Marshal(st.DaemonSet)
		}
		if string(stored[workloads.Index(st.Kind, st.Namespace, st.Name)]) == string(raw) {
			continue
		}
		out.Statuses = append(out.Statuses, workloaddb.StatusWrite{Kind: st.Kind, Namespace: st.Namespace, Name: st.Name, Raw: raw})
	}
	for _, rc := range plan.Revisions {
		set := workloaddb.RevisionSet{Kind: rc.Kind, Namespace: rc.Namespace, Name: rc.Name}
		for _, r := range rc.Revisions {
			wr := workloaddb.Revision{Number: r.Number, Hash: r.Hash, ChangeCause: r.ChangeCause, Halted: r.Halted}
			if r.Template != nil {
				wr.Template, _ = json.Marshal(r.Template)
			}
			set.Revisions = append(set.Revisions, wr)
		}
		out.Revisions = append(out.Revisions, set)
	}
	return out
}
