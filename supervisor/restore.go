package supervisor

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/manifest"
)

// restore rebuilds the core's records after a daemon start: pod instances
// from the database, then what the runtime actually finds. Live instances
// are adopted, never started again; instances that ended while the daemon
// was away report their recorded exit code; records whose instance left no
// trace at all (a reboot wiped the run state) end as ContainerStatusUnknown.
func (d *Daemon) restore() error {
	instances, err := d.store.Instances()
	if err != nil {
		return err
	}
	now := d.now()
	for _, in := range instances {
		d.machine.Restore(in, now)
	}
	rebooted := d.bootChanged()
	recs, err := d.rt.Recover()
	if err != nil {
		return err
	}
	found := map[string]bool{}
	for _, r := range recs {
		id := r.Spec.InstanceID
		uid, name := types.UID(r.Spec.PodUID), r.Spec.Container
		found[id] = true
		in := d.machine.Instance(uid)
		if in == nil || in.Container(name) == nil {
			if r.Alive {
				// Its pod's record was lost (the daemon died between the
				// fork and the write). It must be gone before its pod
				// can start afresh, so it becomes an instance of its
				// own that is being killed: that blocks the pod's name
				// until its processes are gone, as any old instance does.
				d.log.Warn("killing an instance no record knows", "instance", id)
				d.machine.RestoreOrphan(uid, r.Spec.PodNamespace, r.Spec.PodName, name, id, r.Spec.Attempt, now)
				// The orphan is the process runtime's: without the class
				// it passed for a containerd pod, and a daemon restarted
				// after its processes went (kill -9 twice in a row) never
				// saw it gone: Terminating forever, its pod's name blocked.
				if o := d.machine.Instance(uid); o != nil && o.Pod.Spec.RuntimeClassName == nil {
					class := manifest.ProcessRuntimeClass
					o.Pod.Spec.RuntimeClassName = &class
				}
			} else {
				d.rt.Remove(id)
			}
			continue
		}
		d.machine.SawAttempt(uid, name, r.Spec.Attempt)
		c := in.Container(name)
		switch {
		case r.Alive && r.Spec.Attempt >= c.Attempt:
			d.log.Info("adopted running container", "pod", in.Key(), "container", name, "instance", id)
			d.execute(d.machine.Adopted(uid, name, id, r.Spec.Attempt, r.StartedAt))
		case r.Alive:
			d.log.Warn("stopping a superseded instance", "instance", id)
			d.rt.Kill(id)
		case c.InstanceID == id && (c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting):
			d.log.Info("container ended while podvisor was down", "instance", id, "exitCode", r.Exit.ExitCode)
			d.execute(d.machine.Exited(uid, name, termination(id, *r.Exit)))
		}
	}
	d.restoreNetworks()
	for _, in := range d.machine.Instances() {
		// containerd's containers are reconciled when it answers.
		for _, c := range in.AllContainers() {
			if isProcessPod(in.Pod) && (c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting) && !found[c.InstanceID] {
				d.execute(d.machine.Exited(in.UID(), c.Name, termination(c.InstanceID, shim.Unlocated(now))))
			}
		}
		if rebooted {
			d.machine.SandboxLost(in.UID()) // the pod restarts: init containers run again
		}
		// A file that is invalid now keeps the pods it defined before.
		if !in.Terminating && in.Pod.Annotations[manifest.AnnotationSource] == manifest.SourceFile {
			d.dir.Seed(in.Pod.Annotations[manifest.AnnotationFile], []*v1.Pod{in.Pod})
		}
	}
	return nil
}

// bootChanged reports whether the device rebooted since the last daemon
// run, and records the current boot.
func (d *Daemon) bootChanged() bool {
	path := filepath.Join(d.cfg.DataDir, "boot_id")
	cur := shim.BootID()
	prev, err := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(cur), 0o600); err != nil {
		d.log.Warn("recording boot id", "err", err)
	}
	return err == nil && strings.TrimSpace(string(prev)) != cur
}
