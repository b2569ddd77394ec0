package controllers

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// Evict is the eviction API for a hub pod (workloaddb.Evict): its
// device's report says whether it is Ready and running, and the check
// against its budget runs under the scheduling lock (the scheduler's
// mutex, and workloaddb's LockScheduling across replicas), so that no
// pass, on this replica or the leader, reads before it and writes after
// it: its older view of the pod and the budget would undo the eviction
// and the charge. A pass follows, to take the pod off its device's
// desired document.
func (s *Scheduler) Evict(key types.NamespacedName, grace *int64, now time.Time) (*v1.Pod, error) {
	var p *v1.Pod
	err := s.outsidePasses(func() error {
		e := workloaddb.Eviction{GracePeriodSeconds: grace}
		device, err := s.workloads.HubPodDevice(key)
		if err == nil && device != "" {
			e.Phase, e.Healthy, err = s.reported(device, key, now)
		}
		if err == nil {
			p, err = s.workloads.Evict(key, e, now)
		}
		return err
	})
	if err == nil {
		s.Reschedule()
	}
	return p, err
}

// DeletePod deletes a hub pod (workloaddb.DeleteHubPod: gracefully on
// its device) under the scheduling lock, as Evict does; a pass follows.
func (s *Scheduler) DeletePod(key types.NamespacedName, now time.Time) error {
	err := s.outsidePasses(func() error { return s.workloads.DeleteHubPod(key.Namespace, key.Name, now) })
	if err == nil {
		s.Reschedule()
	}
	return err
}

// outsidePasses runs write, a write of hub pods outside a pass, between
// passes: under the scheduler's mutex (this replica's passes) and the
// store's scheduling lock (the leader's, on another replica).
func (s *Scheduler) outsidePasses(write func() error) error {
	c := &s.sched
	c.mu.Lock()
	defer c.mu.Unlock()
	unlock, err := s.workloads.LockScheduling(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	return write()
}

// reported is what a device last reported of a pod: its phase ("" for
// none) and whether it is Ready. A device not Ready reports nothing
// true: its pods are Unknown and not Ready, as the node lifecycle
// controller marks a lost node's pods.
func (s *Scheduler) reported(device string, key types.NamespacedName, now time.Time) (v1.PodPhase, bool, error) {
	phase, ready, found, err := s.fleet.MirrorSummary(device, key.Namespace+"/"+key.Name)
	if err != nil || !found {
		return "", false, err
	}
	d, err := s.fleet.GetDevice(device, now, s.cfg.DeviceTimeout)
	if err != nil {
		return "", false, err
	}
	if !d.Ready {
		return v1.PodUnknown, false, nil
	}
	return phase, ready, nil
}
