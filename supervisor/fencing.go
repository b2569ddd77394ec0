package supervisor

import (
	"fmt"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podview"
)

// gate hands the machine the desired pods the hub's fence and the
// self-fencing leases let run, stops the pods whose lease ran out and
// runs again those whose lease holds again. The loop calls it at every
// step while a fence or a lease is in force (desired.Pods.Gated), and
// wakes for the next lease expiry (step): no polling.
func (d *Daemon) gate() {
	now := d.now()
	g := d.desired.Gate(d.machine.Instances(), now)
	d.machine.SetDesired(g.Pods)
	for _, in := range g.Stop {
		// Its Warning event (LeaseExpired) is recorded with the stop.
		d.execute(d.machine.Disrupt(in.UID(), lifecycle.ReasonLeaseExpired, g.Message[in.UID()], d.machine.GracePeriod(in.Pod), now))
	}
	for _, key := range g.NewlyFenced {
		d.addEvent(podview.Note{Key: key, Type: "Warning", Reason: "Fenced",
			Message: fmt.Sprintf("Stopping: the hub fenced this device (desired generation %d); the pod may run elsewhere", d.desired.FenceGeneration())})
	}
	for _, uid := range g.Revive {
		if in := d.machine.Instance(uid); in != nil && d.machine.ReviveFrom(uid, lifecycle.ReasonLeaseExpired) {
			d.log.Info("self-fencing lease renewed: the pod runs again", "pod", in.Key())
		}
	}
	if len(g.Fenced) > 0 {
		d.log.Debug("fenced pods still running: no other hub pod starts until they are gone", "pods", g.Fenced)
	}
}
