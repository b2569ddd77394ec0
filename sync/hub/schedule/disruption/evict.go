package disruption

import (
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// MaxDisruptedPodSize bounds a budget's disruptedPods, as the API server
// does: past it, evictions wait for the controller to catch up.
const MaxDisruptedPodSize = 2000

// Messages of a refused eviction, the API server's.
const (
	MessageViolates   = "Cannot evict pod as it would violate the pod's disruption budget."
	MessageMultiple   = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
	ReasonEvictionAPI = "EvictionByEvictionAPI"
)

// Refusal is an eviction the API server refuses: Code is its HTTP status
// (429 Too Many Requests: retry; 403, 500: do not), Message its words and
// Cause the budget's detail (the DisruptionBudget cause).
type Refusal struct {
	Code    int
	Message string
	Cause   string
	// Budget names the budget that refused.
	Budget string
}

func (r *Refusal) Error() string {
	if r.Cause == "" {
		return r.Message
	}
	return r.Message + " " + r.Cause
}

// Matching are the budgets of the pod's namespace whose selector selects
// it (a budget with an invalid selector selects nothing).
func Matching(p *v1.Pod, pdbs []*policyv1.PodDisruptionBudget) []*policyv1.PodDisruptionBudget {
	return matching(p, pdbs, selectors(pdbs))
}

// selectors are the budgets' selectors, parsed once (nil for an invalid
// one, which selects nothing).
func selectors(pdbs []*policyv1.PodDisruptionBudget) []labels.Selector {
	out := make([]labels.Selector, len(pdbs))
	for i, pdb := range pdbs {
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
			out[i] = sel
		}
	}
	return out
}

func matching(p *v1.Pod, pdbs []*policyv1.PodDisruptionBudget, sels []labels.Selector) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for i, pdb := range pdbs {
		if pdb.Namespace == p.Namespace && sels[i] != nil && sels[i].Matches(labels.Set(p.Labels)) {
			out = append(out, pdb)
		}
	}
	return out
}

// Check is the eviction API's decision for a pod: nil, nil when it may go
// without spending a disruption (no budget; a terminal, pending or
// terminating pod — ignorable; an unhealthy pod the budget's
// unhealthyPodEvictionPolicy lets go); the budget to charge one
// disruption (Charge) when a healthy pod may go; a Refusal otherwise.
func Check(p *v1.Pod, healthy, ignorable bool, pdbs []*policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, error) {
	if ignorable {
		return nil, nil
	}
	return decide(healthy, Matching(p, pdbs))
}

// decide is Check over the budgets that select the pod.
func decide(healthy bool, matching []*policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, error) {
	switch len(matching) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, &Refusal{Code: http.StatusInternalServerError, Message: MessageMultiple}
	}
	pdb := matching[0]
	if !healthy {
		if pol := pdb.Spec.UnhealthyPodEvictionPolicy; pol != nil && *pol == policyv1.AlwaysAllow {
			return nil, nil
		}
		if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
			return nil, nil // the application is not disrupted now
		}
	}
	// checkAndDecrement.
	switch {
	case pdb.Status.ObservedGeneration < pdb.Generation:
		return nil, &Refusal{Code: http.StatusTooManyRequests, Message: MessageViolates, Budget: pdb.Name,
			Cause: fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name)}
	case pdb.Status.DisruptionsAllowed < 0:
		return nil, &Refusal{Code: http.StatusForbidden, Budget: pdb.Name,
			Message: fmt.Sprintf("poddisruptionbudgets.policy %q is forbidden: pdb disruptions allowed is negative", pdb.Name)}
	case len(pdb.Status.DisruptedPods) > MaxDisruptedPodSize:
		return nil, &Refusal{Code: http.StatusForbidden, Budget: pdb.Name,
			Message: fmt.Sprintf("poddisruptionbudgets.policy %q is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller", pdb.Name)}
	case pdb.Status.DisruptionsAllowed == 0:
		return nil, &Refusal{Code: http.StatusTooManyRequests, Message: MessageViolates, Budget: pdb.Name,
			Cause: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)}
	}
	return pdb, nil
}

// Charge spends one of a budget's disruptions on the pod, as the
// eviction API does: one fewer allowed (the condition turns False at
// none) and, when record is set, the pod in disruptedPods so that the
// controller counts it unhealthy until it is gone.
func Charge(pdb *policyv1.PodDisruptionBudget, pod string, record bool, now time.Time) {
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptionsAllowed == 0 {
		SetAllowedCondition(pdb, now)
	}
	if record {
		if pdb.Status.DisruptedPods == nil {
			pdb.Status.DisruptedPods = map[string]metav1.Time{}
		}
		pdb.Status.DisruptedPods[pod] = metav1.NewTime(now)
	}
}

// Budgets spends the budgets of one scheduling pass: the workload
// controllers ask before they take down a pod in a rollout
// (workloads.Pass.Budgets), and preemption then sees what is left.
type Budgets struct {
	pdbs []*policyv1.PodDisruptionBudget
	// sels are the budgets' selectors, parsed once for every pod a
	// rollout asks about.
	sels []labels.Selector
	now  time.Time
}

// NewBudgets spends the budgets given (their status changes in place).
func NewBudgets(pdbs []*policyv1.PodDisruptionBudget, now time.Time) *Budgets {
	return &Budgets{pdbs: pdbs, sels: selectors(pdbs), now: now}
}

var _ workloads.Budgets = (*Budgets)(nil)

// Disrupt says whether the pod may be taken down now by the eviction
// API's rules, and spends a disruption of its budget if it takes one.
// The pod is terminated in the same pass, so it is not recorded in
// disruptedPods.
func (b *Budgets) Disrupt(p workloads.Pod) bool {
	if Ignorable(p) {
		return true
	}
	pdb, err := decide(Healthy(p), matching(p.Pod, b.pdbs, b.sels))
	if err != nil {
		return false
	}
	if pdb != nil {
		Charge(pdb, p.Pod.Name, false, b.now)
	}
	return true
}

// Ignorable is canIgnorePDB: a pod terminating, not yet running (unplaced
// or reported Pending) or ended disrupts nothing more by going.
func Ignorable(p workloads.Pod) bool {
	switch p.Observed.Phase {
	case v1.PodPending, v1.PodSucceeded, v1.PodFailed:
		return true
	}
	return p.Terminating || p.Node == ""
}

// targetMessages are the DisruptionTarget messages Kubernetes writes for
// each reason.
var targetMessages = map[string]string{
	"PreemptionByScheduler":  "default-scheduler: preempting to accommodate a higher priority pod",
	"DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
	"DeletionByPodGC":        "PodGC: node no longer exists",
	ReasonEvictionAPI:        "Eviction API: evicting",
}

// SetTarget gives a pod the DisruptionTarget=True condition with the
// reason and Kubernetes' message for it, as the component that disrupts
// it does before deleting it.
func SetTarget(p *v1.Pod, reason string, now time.Time) {
	cond := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reason,
		Message: targetMessages[reason], LastTransitionTime: metav1.NewTime(now)}
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == v1.DisruptionTarget {
			if c.Status == v1.ConditionTrue {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			*c = cond
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, cond)
}
