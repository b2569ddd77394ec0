package supervisor

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/desired"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtimeset"
	"github.com/podvisor/podvisor/supervisor/state"
)

// restore rebuilds the core's records after a daemon start: pod instances
// from the database, then what the runtime actually finds. Live instances
// are adopted, never started again; instances that ended while the daemon
// was away report their recorded exit code; records whose instance left no
// trace at all (a reboot wiped the run state) end as ContainerStatusUnknown.
// Instances no record knows (the database was lost, or the daemon died
// between a fork and its write) are rebuilt from their directories: the
// instance locks, not the database, say what runs (DESIGN.md §3).
func (d *Daemon) restore() error {
	r := &restorer{machine: d.machine, store: d.state.Store(), runtimes: d.runtimes, desired: d.desired,
		execute: d.execute, progress: d.recovering, log: d.log, dataDir: d.cfg.DataDir}
	return r.run(d.now())
}

// restorer is the one-time adoption at start-up: it rebuilds the
// machine's records from the store and what the runtimes hold, carrying
// out the core's answers with execute.
type restorer struct {
	machine  *lifecycle.Machine
	store    *state.Store
	runtimes *runtimeset.Set
	desired  *desired.Pods
	execute  func([]lifecycle.Action)
	// progress reports adopted of total pods found running, as each is
	// done.
	progress       func(adopted, total int)
	adopted, total int
	log            *slog.Logger
	dataDir        string
}

// run restores at now.
func (rs *restorer) run(now time.Time) error {
	// lost: the records are gone (a database damaged, deleted or emptied).
	lost := rs.store.Empty() || rs.store.Damaged() != nil
	instances, err := rs.store.Instances()
	if err != nil {
		lost = true
		// Damaged since the check at open (which moves a damaged
		// database aside): the pods are rebuilt from the runtime below.
		rs.log.Error("reading pod records from the state database; rebuilding pods from their instance directories", "err", err)
		instances = nil
	}
	for _, in := range instances {
		rs.machine.Restore(in, now)
	}
	rebooted := rs.bootChanged()
	unrecorded := map[types.UID]*lostPod{}
	for _, class := range rs.runtimes.Classes() {
		rt := rs.runtimes.Named(class)
		if _, later := rt.(runtime.Reconnecting); later {
			// Reconciled when it answers; listed now only to rebuild
			// lost records, before the first reconciliation.
			if lost {
				rs.listLost(class, rt, unrecorded)
			}
			continue
		}
		if err := rs.restoreFrom(class, rt, unrecorded, now); err != nil {
			return err
		}
	}
	rs.rebuild(unrecorded, lost, now)
	for _, in := range rs.machine.Instances() {
		if rebooted {
			rs.machine.SandboxLost(in.UID()) // the pod restarts: init containers run again
		}
		// A file that is invalid now keeps the pods it defined before.
		if !in.Terminating && in.Pod.Annotations[manifest.AnnotationSource] == manifest.SourceFile {
			rs.desired.Dir().Seed(in.Pod.Annotations[manifest.AnnotationFile], []*v1.Pod{in.Pod})
		}
	}
	return nil
}

// restoreFrom reconciles the instances a runtime holds at start with the
// records: live ones are adopted, superseded ones killed, those that
// ended meanwhile report their recorded exit, and records of this
// runtime's pods whose instance left no trace end as
// ContainerStatusUnknown.
func (rs *restorer) restoreFrom(class string, rt runtime.Runtime, unrecorded map[types.UID]*lostPod, now time.Time) error {
	recs, err := rt.Recover()
	if err != nil {
		return err
	}
	found := map[string]bool{}
	alive := map[types.UID]int{} // a pod's running instances not yet handled
	for _, r := range recs {
		if r.Alive {
			if alive[r.PodUID] == 0 {
				rs.total++
			}
			alive[r.PodUID]++
		}
	}
	rs.progress(rs.adopted, rs.total)
	for _, r := range recs {
		id, uid, name := r.InstanceID, r.PodUID, r.Container
		found[id] = true
		in := rs.machine.Instance(uid)
		var rec *lifecycle.Container
		if in != nil {
			rec = in.Container(name)
		}
		what := recoverInstance(r, in != nil, rec)
		if rec != nil {
			rs.machine.SawAttempt(uid, name, r.Attempt)
		}
		switch what {
		case recoverUnrecorded:
			addLost(unrecorded, uid, r.PodNamespace, r.PodName, foundOf(r), class)
		case recoverOrphan:
			rs.log.Warn("killing an instance no record knows", "instance", id)
			rs.machine.RestoreOrphan(uid, r.PodNamespace, r.PodName, name, id, r.Attempt, now)
			// The orphan is this runtime's: without the class its pod
			// passed for another runtime's, and a daemon restarted
			// after its processes went (kill -9 twice in a row) never
			// saw it gone: Terminating forever, its pod's name blocked.
			if o := rs.machine.Instance(uid); o != nil && o.Pod.Spec.RuntimeClassName == nil {
				rs.runtimes.Claim(o.Pod, class)
			}
		case recoverRemove:
			rt.Remove(id)
		case recoverAdopt:
			rs.log.Info("adopted running container", "pod", in.Key(), "container", name, "instance", id)
			rs.execute(rs.machine.Adopted(uid, name, id, r.Attempt, r.StartedAt))
		case recoverKillSuperseded:
			rs.log.Warn("stopping a superseded instance", "instance", id)
			rt.Kill(id)
		case recoverReportExit:
			rs.log.Info("container ended while podvisor was down", "instance", id, "exitCode", r.Exit.ExitCode)
			rs.execute(rs.machine.Exited(uid, name, *r.Exit))
		}
		if r.Alive {
			rs.handled(alive, uid)
		}
	}
	for _, in := range rs.machine.Instances() {
		if rs.runtimes.Of(in.Pod) != rt {
			continue
		}
		for _, c := range in.AllContainers() {
			if !untraced(c, found) {
				continue
			}
			rs.execute(rs.machine.Exited(in.UID(), c.Name, runtime.Unlocated(c.InstanceID, now)))
		}
	}
	return nil
}

// handled counts one running instance of a pod handled; the pod is done
// with its last.
func (rs *restorer) handled(alive map[types.UID]int, uid types.UID) {
	if alive[uid]--; alive[uid] == 0 {
		rs.adopted++
		rs.progress(rs.adopted, rs.total)
	}
}

// foundOf is what the core rebuilds a pod from.
func foundOf(r runtime.Found) lifecycle.Found {
	return lifecycle.Found{Container: r.Container, InstanceID: r.InstanceID, Attempt: r.Attempt,
		Alive: r.Alive, StartedAt: r.StartedAt, Exit: r.Exit}
}

// bootChanged reports whether the device rebooted since the last daemon
// run, and records the current boot.
func (rs *restorer) bootChanged() bool {
	path := filepath.Join(rs.dataDir, "boot_id")
	cur := pidfd.BootID()
	prev, err := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(cur), 0o600); err != nil {
		rs.log.Warn("recording boot id", "err", err)
	}
	return err == nil && strings.TrimSpace(string(prev)) != cur
}

// lostPod is what the runtimes hold of a pod no record knows.
type lostPod struct {
	namespace, name string
	found           []lifecycle.Found
	class           string // the runtime class that holds it
}

func addLost(lost map[types.UID]*lostPod, uid types.UID, namespace, name string, f lifecycle.Found, class string) {
	p := lost[uid]
	if p == nil {
		p = &lostPod{namespace: namespace, name: name, class: class}
		lost[uid] = p
	}
	p.found = append(p.found, f)
}

// listLost adds what a runtime that reconnects holds to the pods to
// rebuild after the records were lost, before the first reconciliation:
// the desired pods then adopt those containers instead of starting second
// copies, and recoverRuntime follows them when it runs.
func (rs *restorer) listLost(class string, rt runtime.Runtime, lost map[types.UID]*lostPod) {
	found, err := rt.Recover()
	if err != nil {
		rs.log.Error("a runtime did not answer while rebuilding lost pod records; its containers are reconciled when it does",
			"runtime", class, "err", err)
		return
	}
	for _, f := range found {
		if f.InstanceID == "" {
			continue
		}
		addLost(lost, f.PodUID, f.PodNamespace, f.PodName, foundOf(f), class)
	}
}

// rebuild records the pods whose instances no record knows, from what
// the runtimes hold: a desired pod with the same UID then adopts the
// running ones. Finished instances of a pod with nothing running are
// history worth keeping only when the records were lost; otherwise they
// are leftovers of a pod already forgotten.
func (rs *restorer) rebuild(unrecorded map[types.UID]*lostPod, lost bool, now time.Time) {
	if len(unrecorded) == 0 {
		return
	}
	if lost && rs.store.Damaged() == nil {
		rs.log.Error("STATE DATABASE HAS NO RECORDS but instances exist (was it deleted or emptied?); rebuilding pods from them",
			"path", filepath.Join(rs.dataDir, "state.db"), "pods", len(unrecorded))
	}
	rebuilt := 0
	for uid, p := range unrecorded {
		if !rebuildable(p.found, lost) {
			for _, f := range p.found {
				if rt := rs.runtimes.Named(p.class); rt != nil {
					rt.Remove(f.InstanceID)
				}
			}
			continue
		}
		rs.log.Warn("rebuilt a pod from its instances", "pod", p.namespace+"/"+p.name, "uid", uid,
			"instances", len(p.found), "running", anyAlive(p.found), "runtime", p.class)
		class := p.class
		if rs.runtimes.ClassOf(&v1.Pod{}) == class {
			class = "" // the runtime of pods that name none
		}
		rs.machine.Rebuild(uid, p.namespace, p.name, class, p.found, now)
		rebuilt++
	}
	if rebuilt > 0 && lost && rs.desired.HubAttached() {
		// The hub's document went with the database: give the hub time
		// to send it again before its pods count as undesired.
		rs.machine.KeepRebuilt(now.Add(RebuiltHubWait))
	}
}

// RebuiltHubWait is how long pods rebuilt after the state database was
// lost wait for their desired pod when a hub may still send it.
const RebuiltHubWait = 5 * time.Minute
