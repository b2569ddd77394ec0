package api

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// statefulSetsWithStatus gives each StatefulSet the status its controller
// reports (workloads.StatefulSetStatus) from the hub's pods and what their
// devices report of them: a pod is Ready as its mirror says, and a
// device not heard from reports nothing Ready. The hub keeps no time the
// device first reported it Ready here, so minReadySeconds counts as met.
func (a *API) statefulSetsWithStatus(sets []*appsv1.StatefulSet, pods []*v1.Pod) ([]*appsv1.StatefulSet, error) {
	if len(sets) == 0 {
		return nil, nil
	}
	now := time.Now()
	mirrors, err := a.Fleet.MirrorPods("", now, a.Timeout)
	if err != nil {
		return nil, err
	}
	reported := map[string]workloads.Observed{}
	for i := range mirrors {
		m := &mirrors[i]
		o := workloads.Observed{Reported: true, Phase: m.Status.Phase}
		for _, c := range m.Status.Conditions {
			o.Ready = o.Ready || c.Type == v1.PodReady && c.Status == v1.ConditionTrue
		}
		reported[m.Spec.NodeName+"|"+m.Namespace+"/"+m.Name] = o
	}
	owners := workloads.NewOwners(nil, nil, sets...)
	byOwner := map[string][]workloads.Pod{}
	for _, p := range pods {
		k := owners.Key(p)
		if k == "" {
			continue
		}
		wp := workloads.Pod{Pod: p, Key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
			Terminating: p.DeletionTimestamp != nil, Node: p.Spec.NodeName}
		if p.Spec.NodeName != "" {
			wp.Observed = reported[p.Spec.NodeName+"|"+p.Namespace+"/"+p.Name]
		}
		byOwner[k] = append(byOwner[k], wp)
	}
	for _, s := range sets {
		s.Status = workloads.StatefulSetStatus(s, byOwner[workloads.Index("StatefulSet", s.Namespace, s.Name)], now)
		s.Kind, s.APIVersion = "StatefulSet", "apps/v1"
	}
	return sets, nil
}
