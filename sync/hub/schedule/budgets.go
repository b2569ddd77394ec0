package schedule

import (
	policyv1 "k8s.io/api/policy/v1"

	"github.com/podvisor/podvisor/sync/hub/schedule/disruption"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// syncBudgets runs the disruption controller over the pass's pods before
// the workload controllers, so that the rollouts and preemption of this
// pass read a fresh disruptionsAllowed; the pass then spends copies.
func (s *state) syncBudgets(in Input) workloads.Budgets {
	if len(in.PDBs) == 0 {
		return nil // an untyped nil: no budgets
	}
	// The workloads with a scale: Deployments and StatefulSets.
	scales := make([]disruption.Scale, 0, len(in.Deployments)+len(in.StatefulSets))
	for _, d := range in.Deployments {
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		scales = append(scales, disruption.Scale{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name, UID: d.UID, Replicas: n})
	}
	for _, st := range in.StatefulSets {
		n := int32(1)
		if st.Spec.Replicas != nil {
			n = *st.Spec.Replicas
		}
		scales = append(scales, disruption.Scale{Kind: "StatefulSet", Namespace: st.Namespace, Name: st.Name, UID: st.UID, Replicas: n})
	}
	res := disruption.Sync(disruption.Input{Now: in.Now, PDBs: in.PDBs, Pods: s.views(s.order), Scales: scales})
	s.pdbs = res.PDBs
	s.plan.Events = append(s.plan.Events, res.Events...)
	return disruption.NewBudgets(s.pdbs, in.Now)
}

// changedBudgets lists in the plan the budgets whose status differs from
// the one the pass was given.
func (s *state) changedBudgets(before []*policyv1.PodDisruptionBudget) {
	for i, pdb := range s.pdbs {
		if i < len(before) && !disruption.StatusEqual(&before[i].Status, &pdb.Status) {
			s.plan.PDBs = append(s.plan.PDBs, pdb)
		}
	}
}
