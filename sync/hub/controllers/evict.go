package controllers

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// Evict is the eviction API for a hub pod (workloaddb.Evict): its
// device's report says whether it is Ready and running, and the check
// against its budget runs under the scheduler's lock, so that no pass
// writes a budget's status between the check and the charge. A pass
// follows, to take the pod off its device's desired document.
func (s *Scheduler) Evict(key types.NamespacedName, grace *int64, now time.Time) (*v1.Pod, error) {
	c := &s.sched
	c.mu.Lock()
	e := workloaddb.Eviction{GracePeriodSeconds: grace}
	device, err := s.workloads.HubPodDevice(key)
	if err == nil && device != "" {
		e.Phase, e.Healthy, err = s.reported(device, key, now)
	}
	var p *v1.Pod
	if err == nil {
		p, err = s.workloads.Evict(key, e, now)
	}
	c.mu.Unlock()
	if err == nil {
		s.Reschedule()
	}
	return p, err
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
