package workloads

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Deployment controller's condition reasons (deploymentutil), and
// the hub's own for a halted rollout.
const (
	ReasonNewRSCreated       = "NewReplicaSetCreated"
	ReasonFoundNewRS         = "FoundNewReplicaSet"
	ReasonRSUpdated          = "ReplicaSetUpdated"
	ReasonNewRSAvailable     = "NewReplicaSetAvailable"
	ReasonTimedOut           = "ProgressDeadlineExceeded"
	ReasonPaused             = "DeploymentPaused"
	ReasonResumed            = "DeploymentResumed"
	ReasonMinimumAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumUnavailable = "MinimumReplicasUnavailable"
	// ReasonRolloutHalted: the failure threshold halted the rollout
	// (Progressing=False), until undo or a new template.
	ReasonRolloutHalted = "RolloutHalted"
)

// Status is a workload's status as its controller computed it in a pass.
type Status struct {
	Kind, Namespace, Name string
	Deployment            *appsv1.DeploymentStatus
	DaemonSet             *appsv1.DaemonSetStatus
	StatefulSet           *appsv1.StatefulSetStatus
	// Revision is the workload's newest revision (0: none yet).
	Revision int64
}

func getCondition(s *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func removeCondition(s *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	out := s.Conditions[:0]
	for _, c := range s.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	s.Conditions = out
}

func (k *controllers) newCondition(t appsv1.DeploymentConditionType, st v1.ConditionStatus, reason, msg string) appsv1.DeploymentCondition {
	now := metav1.NewTime(k.now)
	return appsv1.DeploymentCondition{Type: t, Status: st, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now}
}

// setCondition is deploymentutil.SetDeploymentCondition: a condition of
// the same status and reason is left as it is; one of the same status
// keeps its transition time.
func setCondition(s *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := getCondition(s, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(s, c.Type)
	s.Conditions = append(s.Conditions, c)
}

// maxUnavailable is deploymentutil.MaxUnavailable.
func maxUnavailable(d *appsv1.Deployment, want int) int {
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || want == 0 {
		return 0
	}
	_, unavailable := rollingBounds(d, want)
	return min(unavailable, want)
}

// deploymentStatus is calculateStatus: the counts over the Deployment's
// live pods after this pass's changes (its ReplicaSets' sizes), the old
// conditions, and Available.
func (k *controllers) deploymentStatus(d *appsv1.Deployment, hash string, conds []appsv1.DeploymentCondition, want int) appsv1.DeploymentStatus {
	s := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, CollisionCount: d.Status.CollisionCount}
	for _, p := range k.podsOf(d) {
		if p.Terminating {
			continue
		}
		s.Replicas++
		if p.Pod.Labels[LabelPodTemplateHash] == hash {
			s.UpdatedReplicas++
		}
		if p.Observed.Ready {
			s.ReadyReplicas++
		}
		if k.available(p, d.Spec.MinReadySeconds) {
			s.AvailableReplicas++
		}
	}
	// Unavailable counts against the ReplicaSets' sizes: a replica not
	// made yet is unavailable too.
	s.UnavailableReplicas = max(0, max(s.Replicas, int32(want))-s.AvailableReplicas)
	s.Conditions = append([]appsv1.DeploymentCondition(nil), conds...)
	if int(s.AvailableReplicas) >= want-maxUnavailable(d, want) {
		setCondition(&s, k.newCondition(appsv1.DeploymentAvailable, v1.ConditionTrue, ReasonMinimumAvailable, "Deployment has minimum availability."))
	} else {
		setCondition(&s, k.newCondition(appsv1.DeploymentAvailable, v1.ConditionFalse, ReasonMinimumUnavailable, "Deployment does not have minimum availability."))
	}
	return s
}

// progressDeadline is the Deployment's, 0 for none.
func progressDeadline(d *appsv1.Deployment) time.Duration {
	if d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds == 1<<31-1 {
		return 0
	}
	return time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
}

// syncRolloutStatus is the Deployment controller's: Progressing says the
// new ReplicaSet progressed (lastUpdateTime moves with each step), is
// complete, or made no progress within the deadline. The rollout goes
// on after a timeout, as in Kubernetes; only a halt stops it.
func (k *controllers) syncRolloutStatus(d *appsv1.Deployment, s *appsv1.DeploymentStatus, rsName string, want int, halted string) {
	deadline := progressDeadline(d)
	if deadline == 0 {
		removeCondition(s, appsv1.DeploymentProgressing)
		return
	}
	if halted != "" {
		setCondition(s, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionFalse, ReasonRolloutHalted, halted))
		return
	}
	// The condition as this pass found and left it so far (a new
	// ReplicaSet's); the counts of the status stored before.
	cur := getCondition(s, appsv1.DeploymentProgressing)
	if cur != nil && cur.Reason == ReasonRolloutHalted {
		removeCondition(s, appsv1.DeploymentProgressing) // the halted revision is no longer the newest
		cur = nil
	}
	isComplete := s.Replicas == s.UpdatedReplicas && cur != nil && cur.Reason == ReasonNewRSAvailable
	if isComplete {
		return
	}
	old := d.Status
	complete := int(s.UpdatedReplicas) == want && int(s.Replicas) == want && int(s.AvailableReplicas) == want
	progressing := s.UpdatedReplicas > old.UpdatedReplicas || s.Replicas-s.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		s.ReadyReplicas > old.ReadyReplicas || s.AvailableReplicas > old.AvailableReplicas
	switch {
	case complete:
		setCondition(s, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionTrue, ReasonNewRSAvailable,
			fmt.Sprintf("ReplicaSet %q has successfully progressed.", rsName)))
	case progressing:
		c := k.newCondition(appsv1.DeploymentProgressing, v1.ConditionTrue, ReasonRSUpdated, fmt.Sprintf("ReplicaSet %q is progressing.", rsName))
		if now := getCondition(s, appsv1.DeploymentProgressing); now != nil {
			if now.Status == v1.ConditionTrue {
				c.LastTransitionTime = now.LastTransitionTime
			}
			removeCondition(s, appsv1.DeploymentProgressing)
		}
		setCondition(s, c)
	case k.timedOut(s, deadline):
		setCondition(s, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionFalse, ReasonTimedOut,
			fmt.Sprintf("ReplicaSet %q has timed out progressing.", rsName)))
	}
	if c := getCondition(s, appsv1.DeploymentProgressing); c != nil && c.Reason != ReasonNewRSAvailable && c.Reason != ReasonTimedOut {
		k.wake(c.LastUpdateTime.Add(deadline + time.Second)) // the deadline check, on time
	}
}

// timedOut is deploymentutil.DeploymentTimedOut.
func (k *controllers) timedOut(s *appsv1.DeploymentStatus, deadline time.Duration) bool {
	c := getCondition(s, appsv1.DeploymentProgressing)
	switch {
	case c == nil || c.Reason == ReasonNewRSAvailable:
		return false
	case c.Reason == ReasonTimedOut:
		return true
	}
	return c.LastUpdateTime.Add(deadline).Before(k.now)
}

// checkPausedConditions is the Deployment controller's: Progressing
// Unknown DeploymentPaused while paused, DeploymentResumed once resumed;
// a timeout already reported stays.
func (k *controllers) checkPausedConditions(d *appsv1.Deployment, s *appsv1.DeploymentStatus) {
	if progressDeadline(d) == 0 {
		return
	}
	c := getCondition(s, appsv1.DeploymentProgressing)
	if c != nil && c.Reason == ReasonTimedOut {
		return
	}
	pausedExists := c != nil && c.Reason == ReasonPaused
	switch {
	case d.Spec.Paused && !pausedExists:
		setCondition(s, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionUnknown, ReasonPaused, "Deployment is paused"))
	case !d.Spec.Paused && pausedExists:
		setCondition(s, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionUnknown, ReasonResumed, "Deployment is resumed"))
	}
}

// wake asks for a pass at t (the earliest asked wins).
func (k *controllers) wake(t time.Time) {
	if t.After(k.now) && (k.res.Wake.IsZero() || t.Before(k.res.Wake)) {
		k.res.Wake = t
	}
}

// wakeWhenAvailable asks for a pass when a Ready pod's minReadySeconds
// run out, so it counts as available on time.
func (k *controllers) wakeWhenAvailable(p Pod, minReadySeconds int32) {
	if o := p.Observed; o.Ready && minReadySeconds > 0 {
		k.wake(o.ReadySince.Add(time.Duration(minReadySeconds) * time.Second))
	}
}
