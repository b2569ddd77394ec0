// Package supervisor is the I/O shell around the lifecycle core: it feeds
// the core manifests, runtime exits and the clock, executes the actions it
// returns, persists its records and publishes pod status for the local API.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/desired"
	"github.com/podvisor/podvisor/supervisor/hooks"
	"github.com/podvisor/podvisor/supervisor/images"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/podcgroups"
	"github.com/podvisor/podvisor/supervisor/podfs"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/podview"
	"github.com/podvisor/podvisor/supervisor/pressure"
	"github.com/podvisor/podvisor/supervisor/retention"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtimeset"
	"github.com/podvisor/podvisor/supervisor/state"
)

// Daemon supervises the pods of one device.
type Daemon struct {
	cfg     *config.Config
	opts    Options
	log     *slog.Logger
	machine *lifecycle.Machine
	store   *state.Store
	desired *desired.Pods // the pods the manifest files and the hub ask for
	node    runtime.PodEnv
	now     func() time.Time
	lock    *os.File // the data directory's instance lock

	probing  *podprobes.Prober // probes, the listen watcher and traffic counters
	started  chan startResult
	hooks    *hooks.Runner // lifecycle hooks, whose ends come back to the loop
	requests chan request
	// stopped closes when Run ends: requests fail at once from then on.
	stopped chan struct{}
	// supervising closes when Run has restored the pods, read the
	// manifests and starts supervising them.
	supervising chan struct{}
	view        *podview.View       // published pod status, written by the loop
	cgroups     *podcgroups.Manager // Driver nil without cgroups
	// protector: pressure eviction, drain and the node's status.
	protector *nodeprotect.Protector
	// runtimes run the pods by runtimeClassName and gather what they
	// report for the loop.
	runtimes *runtimeset.Set
	// images manages the images of the runtime that keeps them.
	images *images.Images
	// podFS prepares pods' volumes and files and removes them.
	podFS *podfs.FS
	// retention lays out containers' logs and keeps finished instances
	// and logs within their bounds.
	retention *retention.Keeper
}

type startResult struct {
	pod        types.UID
	container  string
	instanceID string
	rt         runtime.Runtime
	runtime.Started
}

// New prepares a daemon from a validated config; Run starts it.
func New(c *config.Config, o Options, log *slog.Logger) (*Daemon, error) {
	policy, err := devicePolicy(c)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:         c,
		opts:        o,
		log:         log,
		machine:     lifecycle.NewMachine(coreConfig(c)),
		now:         time.Now,
		started:     make(chan startResult, 64),
		requests:    make(chan request),
		stopped:     make(chan struct{}),
		supervising: make(chan struct{}),
		node:        runtime.PodEnv{NodeName: c.NodeName, HostIP: hostIP()},
		cgroups:     podcgroups.New(podcgroups.Options{Root: c.Cgroups.Root, Mount: c.Cgroups.Mount, Driver: c.Cgroups.Driver, Log: log}),
		runtimes:    runtimeset.New(log),
		podFS:       podfs.New(podfs.Options{DataDir: c.DataDir, AllowedHostPaths: c.Security.AllowedHostPaths, Log: log}),
		retention: retention.New(retention.Options{DataDir: c.DataDir, MaxDeadPerContainer: c.GC.MaxDeadPerContainer,
			MaxDeadContainers: c.GC.MaxDeadContainers, Log: log}),
		desired: desired.New(desired.Options{ManifestDir: c.Manifests, ManifestResync: c.ManifestResync.Duration, ManifestSettle: c.ManifestSettle,
			AllowUntrustedManifests: c.Security.AllowUntrustedManifests, Policy: policy, Log: log}),
	}
	d.hooks = hooks.New(hooks.Options{Node: func() runtime.PodEnv { return d.node }, RuntimeOf: d.runtimes.Of})
	d.view = podview.New(podview.Options{NodeName: c.NodeName, HostIP: d.node.HostIP, LogPath: d.retention.LogPath, RuntimeOf: d.runtimes.Of})
	return d, nil
}

// Run supervises until ctx ends. Pods keep running after it returns unless
// StopPodsOnExit is set.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.stopped)
	if err := d.OpenState(); err != nil {
		return err
	}
	defer d.unlockDataDir()
	defer d.store.Close()
	tightenStateFiles(filepath.Join(d.cfg.DataDir, "state.db"), d.log)
	if err := os.MkdirAll(d.cfg.Manifests, 0o755); err != nil {
		return fmt.Errorf("manifest directory: %w", err)
	}
	if err := d.setupNodeProtection(); err != nil {
		return err
	}
	if err := d.cgroups.Setup(); err != nil {
		return err
	}
	d.node.Allocatable = d.protector.Allocatable() // downward API limits a container leaves unset
	d.probing = podprobes.Open(ctx, podprobes.Options{Listen: string(d.cfg.Probes.ListenMode()), MaxPods: int(d.cfg.Node.MaxPods),
		Cgroups: d.cgroups, RuntimeOf: d.runtimes.Of, Log: d.log}) // before the runtimes: it sets where process containers are placed
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
	d.machine.SetAdmitter(d.protector.Admitter())
	d.protector.UseImageFS(d.images.FS())
	d.watchPressure(ctx)
	d.images.Start(ctx)
	if d.desired.HubAttached() {
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
	close(d.supervising)
	d.loop(ctx, manifests, nil)
	if d.cfg.StopPodsOnExit {
		d.stopAll()
	}
	d.apply(d.machine.Flush())
	return nil
}

// Supervising closes once Run has restored the pods and read the
// manifests, and starts supervising them: the daemon's start-up is over.
func (d *Daemon) Supervising() <-chan struct{} { return d.supervising }

// OpenState takes the data directory's lock and opens the state database,
// moving a damaged one aside for an empty one: the pods are then rebuilt
// from their instance directories, not killed. Run calls it; call it
// before anything else opens the database (the hub's tables live in it).
func (d *Daemon) OpenState() error {
	if d.store != nil {
		return nil
	}
	if err := d.LockDataDir(); err != nil {
		return err
	}
	var err error
	d.store, err = state.OpenOrReplace(filepath.Join(d.cfg.DataDir, "state.db"), d.log)
	return err
}

// loop is the one goroutine that owns the machine. It runs until ctx ends
// or, when done is given, until done reports true after a step.
func (d *Daemon) loop(ctx context.Context, manifests <-chan manifest.State, done func() bool) {
	wake := time.NewTimer(time.Hour)
	for {
		next := d.step()
		if done != nil && done() {
			return
		}
		resetTimer(wake, next, d.now())
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
			d.images.Rescan() // what failed to import while it was away
		case a := <-d.images.Arrived():
			d.machine.RetryWaiting(a.At, d.now(), a.Reasons...)
		case r := <-d.started:
			d.startDone(r)
		case r := <-d.hooks.Results():
			d.hookDone(r)
		case r := <-d.probing.Reports():
			d.probed(r)
		case req := <-d.requests:
			req.reply <- req.fn()
		case <-d.protector.Woken():
			d.protectNode(d.protector.Wake(ctx, d.machine))
		case <-d.protector.Recheck():
			d.protectNode(d.protector.Look(ctx, pressure.WakeRecheck, d.machine))
		case <-d.protector.DrainTimer():
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
	rd := d.machine.Ready(now)
	d.apply(rd)
	if !rd.Unsaved {
		d.runtimes.FlushRemovals() // every exit they follow is saved
	}
	d.view.Publish(d.machine, now, rd.Changed, podview.Sources{Desired: d.desired.FileWants, Invalid: d.desired.Invalid()})
	return rd.NextWake
}

// apply is the one place the daemon persists: the Ready's records are
// saved before its actions leave, so a start is on disk before its
// process runs and a daemon killed right after knows the instance and its
// restart count (the machine batches the changes nothing waits on).
func (d *Daemon) apply(rd lifecycle.Ready) {
	if len(rd.Records) > 0 || len(rd.Forgotten) > 0 {
		if err := d.store.Save(rd.Records, rd.Forgotten); err != nil {
			d.log.Error("saving state", "err", err)
		}
	}
	d.execute(rd.Actions)
	d.machine.Advance(rd)
}

// request is work the API asks the loop to do on the machine.
type request struct {
	fn    func() error
	reply chan error
}

// do runs fn on the loop goroutine, which owns the machine.
func (d *Daemon) do(fn func() error) error {
	r := request{fn: fn, reply: make(chan error, 1)}
	select {
	case d.requests <- r:
		return <-r.reply
	case <-d.stopped:
		return errStopped
	case <-time.After(10 * time.Second):
		return errors.New("the daemon is busy; try again")
	}
}

// stopAll terminates every pod and waits for them, bounded by the longest
// grace period plus a margin. Manifests are no longer read; everything
// else (exits, hooks, API requests) is served as usual.
func (d *Daemon) stopAll() {
	d.log.Info("stopping all pods before exit")
	d.desired.Retire()
	d.machine.SetDesired(nil)
	ctx, cancel := context.WithTimeout(context.Background(), d.longestGrace()+5*time.Second)
	defer cancel()
	d.loop(ctx, nil, func() bool { return len(d.machine.Instances()) == 0 })
}

func (d *Daemon) longestGrace() time.Duration {
	g := lifecycle.DefaultConfig().MinGracePeriod
	for _, in := range d.machine.Instances() {
		if s := in.Pod.Spec.TerminationGracePeriodSeconds; s != nil && time.Duration(*s)*time.Second > g {
			g = time.Duration(*s) * time.Second
		}
	}
	return g
}

func (d *Daemon) setManifests(st manifest.State) {
	for _, n := range d.desired.SetFiles(st, d.now()) {
		d.addEvent(n)
	}
	d.applyDesired()
}

func resetTimer(t *time.Timer, at, now time.Time) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if at.IsZero() {
		t.Reset(time.Hour)
		return
	}
	t.Reset(max(at.Sub(now), 0))
}

// LockDataDir takes the data directory's instance lock, creating the
// directory (0700) if needed. Run takes it if it is not held yet; the
// command calls it first, so that a second daemon fails before it touches
// anything the first one uses, such as the API socket.
func (d *Daemon) LockDataDir() error {
	if d.lock != nil {
		return nil
	}
	if err := os.MkdirAll(d.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	lock, err := lockDataDir(d.cfg.DataDir)
	if err != nil {
		return err
	}
	d.lock = lock
	return nil
}

func (d *Daemon) unlockDataDir() {
	d.lock.Close()
	d.lock = nil
}

// lockDataDir makes sure one daemon at a time uses a data directory: two
// would each start their own copy of every pod.
func lockDataDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, "podvisor.lock")
	f, err := api.LockFile(name)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, fmt.Errorf("data directory %s is in use by another podvisor%s", dir, holders(name))
	}
	return f, err
}

// holders names the processes that have a file open, for error messages.
func holders(path string) string {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			pid := strings.Split(fd, "/")[2]
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			out = append(out, fmt.Sprintf("pid %s (%s)", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": held by " + strings.Join(out, ", ")
}

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
