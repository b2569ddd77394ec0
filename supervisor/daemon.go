// Package supervisor is the I/O shell around the lifecycle core: it feeds
// the core manifests, runtime exits and the clock, executes the actions it
// returns, persists its records and publishes pod status for the local API.
package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/supervisor/desired"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/hooks"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/podcgroups"
	"github.com/podvisor/podvisor/supervisor/podfs"
	"github.com/podvisor/podvisor/supervisor/podobjects"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/podview"
	"github.com/podvisor/podvisor/supervisor/pressure"
	"github.com/podvisor/podvisor/supervisor/retention"
	"github.com/podvisor/podvisor/supervisor/runtimeset"
	"github.com/podvisor/podvisor/supervisor/state"
)

// Daemon supervises the pods of one device.
type Daemon struct {
	cfg        *config.Config
	log        *slog.Logger
	machine    *lifecycle.Machine
	state      *state.Dir    // the data directory's lock and state database
	desired    *desired.Pods // the pods the manifest files and the hub ask for
	nodeNotes  nodeNotes     // annotations of the node's view set from outside the loop
	leaseSaved time.Time     // when keepLease last wrote the renewal (the loop's own)
	now        func() time.Time

	probing *podprobes.Prober // probes, the listen watcher and traffic counters
	hooks   *hooks.Runner     // lifecycle hooks, whose ends come back to the loop
	// inbox brings the loop the API's and the hub's requests.
	inbox   *inbox
	view    *podview.View       // published pod status, written by the loop
	cgroups *podcgroups.Manager // Driver nil without cgroups
	// protector: pressure eviction, drain, the node's status and what
	// the downward API tells of the node.
	protector *nodeprotect.Protector
	// runtimes run the pods by runtimeClassName, gather what they report
	// for the loop and hold the images of the runtime that keeps them.
	runtimes *runtimeset.Set
	// podFS prepares pods' volumes and files and removes them.
	podFS *podfs.FS
	// objects are the ConfigMaps and Secrets each pod may see.
	objects *podobjects.Sources
	// retention lays out containers' logs and keeps finished instances
	// and logs within their bounds.
	retention *retention.Keeper
	// service tells systemd the daemon's readiness, status and liveness.
	service *serviceManager
	// metrics counts what the loop does, for the metrics listener and
	// the heartbeat's summary.
	metrics *devmetrics.Recorder
	// restarting: Run ends for a restart into another version (Restart):
	// the pods are left running whatever StopPodsOnExit says.
	restarting atomic.Bool
}

// Restart makes Run, once its ctx ends, leave every pod running (even with
// StopPodsOnExit) and tell the service manager it reloads rather than
// stops: the process executes the launcher next, keeping its PID, and the
// next daemon adopts the pods (the self-update).
func (d *Daemon) Restart() { d.restarting.Store(true) }

// New prepares a daemon from a validated config; Run starts it.
func New(c *config.Config, o Options, log *slog.Logger) (*Daemon, error) {
	policy, err := devicePolicy(c)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:      c,
		log:      log,
		machine:  lifecycle.NewMachine(coreConfig(c)),
		state:    state.NewDir(c.DataDir, log),
		now:      time.Now,
		inbox:    newInbox(),
		service:  newServiceManager(o.Notify, log),
		cgroups:  podcgroups.New(podcgroups.Options{Root: c.Cgroups.Root, Mount: c.Cgroups.Mount, Driver: c.Cgroups.Driver, Log: log}),
		runtimes: runtimeset.New(log),
		podFS:    podfs.New(podfs.Options{DataDir: c.DataDir, AllowedHostPaths: c.Security.AllowedHostPaths, Log: log}),
		retention: retention.New(retention.Options{DataDir: c.DataDir, MaxDeadPerContainer: c.GC.MaxDeadPerContainer,
			MaxDeadContainers: c.GC.MaxDeadContainers, Log: log}),
		desired: desired.New(desired.Options{ManifestDir: c.Manifests, ManifestResync: c.ManifestResync.Duration, ManifestSettle: c.ManifestSettle,
			AllowUntrustedManifests: c.Security.AllowUntrustedManifests, Policy: policy, Log: log,
			MaxObjects: c.Objects.MaxObjects, MaxObjectBytes: c.Objects.MaxBytes.Value()}),
		objects: podobjects.New(),
		metrics: devmetrics.NewRecorder(time.Now()),
	}
	d.runtimes.Choose(o.Runtimes, o.DefaultRuntime)
	ip := hostIP()
	// The image collector runs at every look; the runtimes, and with
	// them the images, are set up in Run, after the protector.
	collectImages := func(obs map[eviction.Signal]eviction.Observation) { d.runtimes.Images().Collect(obs) }
	if d.protector, err = newProtector(c, o.Version, ip, podUsage(d.cgroups, d.retention), collectImages,
		func() time.Time { return d.now() }, log); err != nil {
		return nil, err
	}
	d.hooks = hooks.New(hooks.Options{Node: d.podEnv, RuntimeOf: d.runtimes.Of})
	d.view = podview.New(podview.Options{NodeName: c.NodeName, HostIP: ip, LogPath: d.retention.LogPath, RuntimeOf: d.runtimes.Of})
	return d, nil
}

// Run supervises until ctx ends. Pods keep running after it returns unless
// StopPodsOnExit is set.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.inbox.stop()
	if err := d.OpenState(); err != nil {
		return err
	}
	defer d.state.Close()
	d.recovering(0, 0)
	tightenStateFiles(d.state.DatabasePath(), d.log)
	if err := os.MkdirAll(d.cfg.Manifests, 0o755); err != nil {
		return fmt.Errorf("manifest directory: %w", err)
	}
	if err := d.cgroups.Setup(); err != nil {
		return err
	}
	d.protector.ReadAllocatable() // downward API limits a container leaves unset
	d.probing = podprobes.Open(ctx, podprobes.Options{Listen: string(d.cfg.Probes.ListenMode()), MaxPods: int(d.cfg.Node.MaxPods),
		Cgroups: d.cgroups, RuntimeOf: d.runtimes.Of, Log: d.log, Ran: d.metrics.ProbeRan}) // before the runtimes: it sets where process containers are placed
	defer d.probing.Close()
	classes, errs := priority.LoadDir(filepath.Join(d.cfg.ConfigDir, "priorityclasses"))
	for _, err := range errs {
		d.log.Error("priority class rejected", "err", err)
	}
	d.desired.SetClasses(classes)
	// Exits are forwarded until Run returns: StopPodsOnExit waits for
	// them after ctx ends.
	forwarding := make(chan struct{})
	defer close(forwarding)
	closeRuntimes, err := d.setupRuntimes(ctx.Done(), forwarding)
	if err != nil {
		return err
	}
	defer closeRuntimes()
	d.machine.SetAdmitter(d.admitter(d.protector.Admitter()))
	d.protector.UseImageFS(d.runtimes.Images().FS())
	d.watchPressure(ctx)
	d.runtimes.Images().Start(ctx)
	if d.desired.HubAttached() {
		d.loadLease()
		defer d.saveLease()
		d.applyDesired() // the stored hub pods, before anything is reconciled
	}
	if err := d.restore(); err != nil {
		return err
	}
	if err := d.desired.Dir().Watch(); err != nil {
		d.log.Error("manifest watch unavailable; relying on the periodic re-list", "err", err)
	}
	st, err := d.desired.Dir().Load()
	if err != nil {
		return err
	}
	d.setManifests(st)

	manifests := make(chan manifest.State, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := d.desired.Dir().Run(watchCtx, manifests); err != nil {
			d.log.Error("manifest watch stopped; relying on nothing else", "err", err)
		}
	}()
	d.log.Info("podvisor running", "manifests", d.cfg.Manifests, "data", d.cfg.DataDir, "node", d.cfg.NodeName)
	d.inbox.startSupervising()
	d.supervising()
	d.armTestStall(ctx) // test builds only
	d.loop(ctx, manifests, nil)
	d.stopping()
	if d.cfg.StopPodsOnExit && !d.restarting.Load() {
		d.stopAll()
	}
	d.apply(d.machine.Flush())
	return nil
}

// Supervising closes once Run has restored the pods and read the
// manifests, and starts supervising them: the daemon's start-up is over.
func (d *Daemon) Supervising() <-chan struct{} { return d.inbox.supervising }

// OpenState takes the data directory's lock and opens the state database,
// moving a damaged one aside for an empty one: the pods are then rebuilt
// from their instance directories, not killed. Run calls it; call it
// before anything else opens the database (the hub's tables live in it).
func (d *Daemon) OpenState() error { return d.state.Open() }

// loop is the one goroutine that owns the machine. It runs until ctx ends
// or, when done is given, until done reports true after a step.
func (d *Daemon) loop(ctx context.Context, manifests <-chan manifest.State, done func() bool) {
	wake := time.NewTimer(time.Hour)
	for {
		next := d.step()
		d.service.stepped()
		if done != nil && done() {
			return
		}
		next = d.tellService(next)
		wake.Reset(lifecycle.WakeIn(next, d.now()))
		select {
		case <-ctx.Done():
			return
		case st := <-manifests:
			d.setManifests(st)
		case x := <-d.runtimes.Exits():
			d.exited(x.Runtime, x.Exit)
		case rt := <-d.runtimes.RecoverRetry():
			d.recoverRuntime(rt)
		case rt := <-d.runtimes.Reconnected():
			d.recoverRuntime(rt)
			d.runtimes.Images().Rescan() // what failed to import while it was away
		case a := <-d.runtimes.Images().Arrived():
			d.machine.RetryWaiting(a.At, d.now(), a.Reasons...)
		case <-d.inbox.objects:
			d.takeObjectChanges()
		case r := <-d.runtimes.Started():
			d.startDone(r)
		case r := <-d.hooks.Results():
			d.hookDone(r)
		case r := <-d.probing.Reports():
			d.probed(r)
		case req := <-d.inbox.requests:
			req.serve()
		case <-d.protector.Woken():
			d.protectNode(d.protector.Wake(ctx, d.machine))
		case <-d.protector.Recheck():
			d.protectNode(d.protector.Look(ctx, pressure.WakeRecheck, d.machine))
		case <-d.protector.DrainTimer():
		case <-d.service.linkWake(): // the hub link changed: tellService sends it
		case <-wake.C:
		}
	}
}

// step carries out one Ready of the machine and publishes the new status;
// it returns when the machine wants the next step at the latest. The drain
// goes first, so that the pods it stops are in the Ready: saved, shown and
// woken for like any change.
func (d *Daemon) step() time.Time {
	now := d.now()
	d.stopDrained(d.protector.AdvanceDrain(d.machine))
	if d.desired.Gated() {
		d.gate()
	}
	rd := d.machine.Ready(now)
	d.apply(rd)
	if !rd.Unsaved {
		d.runtimes.FlushRemovals() // every exit they follow is saved
	}
	d.view.Publish(d.machine, now, rd.Changed, podview.Sources{Desired: d.desired.Wants, Invalid: d.desired.Invalid()})
	if len(rd.Changed) > 0 {
		d.observeMetrics(now)
	}
	if in, ok := d.desired.NextExpiry(); ok {
		if e := now.Add(in); rd.NextWake.IsZero() || e.Before(rd.NextWake) {
			return e // a lease runs out: stop its pods on time
		}
	}
	return rd.NextWake
}

// apply is the one place the daemon persists: the Ready's records are
// saved before its actions leave, so a start is on disk before its
// process runs and a daemon killed right after knows the instance and its
// restart count (the machine batches the changes nothing waits on).
func (d *Daemon) apply(rd lifecycle.Ready) {
	if len(rd.Records) > 0 || len(rd.Forgotten) > 0 {
		if err := d.state.Store().Save(rd.Records, rd.Forgotten); err != nil {
			d.log.Error("saving state", "err", err)
		}
	}
	d.execute(rd.Actions)
	d.machine.Advance(rd)
}

// stopAll terminates every pod and waits for them, bounded by the longest
// grace period plus a margin. Manifests are no longer read; everything
// else (exits, hooks, API requests) is served as usual.
func (d *Daemon) stopAll() {
	d.log.Info("stopping all pods before exit")
	d.desired.Retire()
	d.machine.SetDesired(nil)
	ctx, cancel := context.WithTimeout(context.Background(), d.machine.LongestGrace()+5*time.Second)
	defer cancel()
	d.loop(ctx, nil, func() bool { return len(d.machine.Instances()) == 0 })
}

func (d *Daemon) setManifests(st manifest.State) {
	for _, n := range d.desired.SetFiles(st, d.now()) {
		d.addEvent(n)
	}
	d.objectsChanged(d.objects.SetLocal(st.Objects))
	d.applyDesired()
}

// LockDataDir takes the data directory's instance lock, creating the
// directory (0700) if needed. Run takes it if it is not held yet; the
// command calls it first, so that a second daemon fails before it touches
// anything the first one uses, such as the API socket.
func (d *Daemon) LockDataDir() error { return d.state.Lock() }

// tightenStateFiles makes the state database and its WAL and shared-memory
// files 0600. SQLite creates them 0644 less the umask, and makes a new WAL
// with the database's own mode, so fixing the database fixes the rest for
// good.
//
// It changes modes by name and never opens the files: SQLite holds POSIX
// record locks on them for this process, and closing any descriptor of a
// file drops every such lock the process holds on it (fcntl(2)). Without
// its shared lock on the -shm "DMS" byte, the next process to open the
// database (an operator's sqlite3, a backup) truncates -shm under the
// daemon's mapping of it: SIGBUS; without its SHARED lock on the database,
// a read-write reader that closes checkpoints and deletes the WAL the
// daemon still writes. The data directory is the daemon's own (0700), so
// no one can swap a name between the Lstat and the Chmod.
func tightenStateFiles(db string, log *slog.Logger) {
	for _, name := range []string{db, db + "-wal", db + "-shm"} {
		st, err := os.Lstat(name)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() == 0o600 {
			continue // not there (yet), not ours to change, or done
		}
		if err := os.Chmod(name, 0o600); err != nil {
			log.Warn("could not make a state file private", "file", name, "err", err)
		}
	}
}
