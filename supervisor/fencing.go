package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/pod/lease"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"

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
	g := d.desired.Gate(d.machine.Instances())
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

// leaseFile keeps, across a restart of the daemon within one boot, the
// last lease renewal on the lease clock (CLOCK_BOOTTIME, continuous
// through the boot), so that a restart does not stop the lease pods.
// It is written as the daemon exits, and while a lease is in force at
// renewals too (keepLease), so that a daemon killed or restarted by its
// watchdog also finds a recent one; an older renewal is still one that
// happened, so the lease only runs out sooner. After a reboot the lease
// clock starts again, and the boot ID refuses the file: every lease
// starts expired.
const leaseFile = "lease.json"

// leaseSaveEvery bounds how often a renewal is written while a lease is in
// force: a killed daemon's successor finds a renewal at most this old. The
// file is replaced by a rename and never synced: it is worth nothing
// after a reboot, so only the page cache sees most writes.
const leaseSaveEvery = 2 * time.Second

// keepLease writes the renewal just taken, at most every leaseSaveEvery,
// while a lease is in force.
func (d *Daemon) keepLease() {
	if !d.desired.Gated() {
		return
	}
	if now := time.Now(); now.Sub(d.leaseSaved) >= leaseSaveEvery {
		d.leaseSaved = now
		d.saveLease()
	}
}

type savedLease struct {
	BootID  string `json:"bootID"`
	Renewed int64  `json:"renewed"` // lease clock, nanoseconds
}

func (d *Daemon) saveLease() {
	r := d.desired.Renewed()
	if r.IsZero() {
		return
	}
	b, _ := json.Marshal(savedLease{BootID: pidfd.BootID(), Renewed: r.UnixNano()})
	path := filepath.Join(d.cfg.DataDir, leaseFile)
	// A rename, so that a daemon killed mid-write leaves the previous
	// renewal rather than a torn file.
	err := os.WriteFile(path+".tmp", b, 0o600)
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		d.log.Warn("keeping the lease renewal for the next start", "err", err)
	}
}

func (d *Daemon) loadLease() {
	b, err := os.ReadFile(filepath.Join(d.cfg.DataDir, leaseFile))
	if err != nil {
		return
	}
	var s savedLease
	if json.Unmarshal(b, &s) != nil || s.BootID == "" || s.BootID != pidfd.BootID() || s.Renewed <= 0 {
		return // another boot's clock, or unreadable: every lease starts expired
	}
	if at := time.Unix(0, s.Renewed); !at.After(lease.Now()) {
		d.desired.Renew(at)
	}
}
