package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/firmware/agent"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/supervisor/logind"
	"github.com/podvisor/podvisor/supervisor/sdnotify"
)

// cmdRun parses run's flags, loads the config and runs the daemon until
// ctx ends.
func cmdRun(ctx context.Context, args []string, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (YAML)")
	manifests := fs.String("manifests", "", "manifest directory (default "+config.DefaultManifests+")")
	dataDir := fs.String("data-dir", "", "state directory (default "+config.DefaultDataDir+")")
	socket := fs.String("socket", "", "API socket (default "+config.DefaultSocket+")")
	stopPods := fs.Bool("stop-pods-on-exit", false, "stop every pod gracefully when the daemon exits")
	verbose := fs.Bool("v", false, "log debug messages")
	hubURL := fs.String("hub", "", "hub broker, mqtt://HOST:PORT or mqtts://HOST:PORT, or several of one cluster separated by commas (config hub.url, hub.urls)")
	deviceID := fs.String("device-id", "", "this device's ID at the hub (config hub.deviceId; default the node name)")
	hubKey := fs.String("hub-key", "", "the hub's public key, hub.pub from podhub init (config hub.key)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics on HOST:PORT or unix:PATH (config metrics.listen; off by default)")
	if pos, err := parseInterspersed(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("run: unexpected argument %q", pos[0])
	}
	// A version on trial that cannot run records why in its slot: the
	// rollback's reason (the data directory is the file's once read).
	recordIn := *dataDir
	if recordIn == "" {
		recordIn = config.DefaultDataDir
	}
	defer func() {
		if err != nil {
			agent.RecordError(recordIn, err)
		}
	}()
	conf, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	// Flags given on the command line win over the file.
	for flagValue, setting := range map[*string]*string{manifests: &conf.Manifests, dataDir: &conf.DataDir, socket: &conf.Socket,
		hubURL: &conf.Hub.URL, deviceID: &conf.Hub.DeviceID, hubKey: &conf.Hub.Key, metricsListen: &conf.Metrics.Listen} {
		if *flagValue != "" {
			*setting = *flagValue
		}
	}
	if *hubURL != "" {
		conf.Hub.URLs = nil // --hub replaces the file's brokers, in either form
	}
	recordIn = conf.DataDir
	if err := conf.Validate(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// The self-update's launcher, before anything is opened: it may
	// execute another version in this process.
	if err := launch(conf, args, log); err != nil {
		return err
	}
	// What a previous daemon in this process started is ours to reap.
	reapInherited()
	// A slot's podvisor is the release the hub ordered: it reports that
	// version, whatever its build was stamped with.
	if rel := agent.RunningRelease(conf.DataDir); rel != "" {
		version = rel
	}
	opts, err := daemonOptions(conf)
	if err != nil {
		return err
	}
	// Under systemd (Type=notify) the daemon says when it is ready, how
	// it is, and that its loop is alive; elsewhere it sends nothing.
	if opts.Notify, err = sdnotify.FromEnv(); err != nil {
		return err
	}
	conf.StopPodsOnExit = *stopPods
	tuneGoRuntime()
	stopProfile, err := startCPUProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	err = runDaemon(ctx, conf, opts, log)
	if errors.Is(err, errRelaunch) {
		stopProfile()
		return relaunch(args) // every file of the daemon is closed: the launcher starts the next one
	}
	return err
}

// loadConfig is the config file at path, or the defaults without one.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

// tuneGoRuntime sets the Go runtime for a daemon that mostly waits,
// unless the environment sets it.
func tuneGoRuntime() {
	if os.Getenv("GOMAXPROCS") == "" {
		// The daemon waits on events and does little computing at a
		// time; one P avoids the scheduler handing wake-ups between
		// threads. Measured with make bench: 100 TCP probes a second
		// cost 2.1% of a core with two Ps, 1.15% with one.
		runtime.GOMAXPROCS(1)
		// The shims (and the containerd plugin) inherit it and start
		// with one P, instead of sizing their runtime for every CPU
		// before they call GOMAXPROCS(1): 0.15 MiB less private memory
		// per shim (docs/footprint.md). Containers and probes get their
		// pod's environment, never the daemon's.
		os.Setenv("GOMAXPROCS", "1")
	}
	if os.Getenv("GOGC") == "" {
		// The daemon's heap is a few MiB; collecting at 50% growth
		// instead of 100% costs little CPU and keeps ~2 MiB less
		// resident on a device where every MiB counts.
		debug.SetGCPercent(50)
	}
}

// runDaemon runs the daemon, its local API and its hub agent until ctx
// ends.
func runDaemon(ctx context.Context, conf *config.Config, opts supervisor.Options, log *slog.Logger) error {
	// The order matters: the directories are checked, then the data
	// directory's lock is taken, then the socket's; only then is anything
	// opened or replaced, so a second daemon fails without disturbing the
	// first one's socket or state.
	if err := privateDir("data directory", conf.DataDir); err != nil {
		return err
	}
	if err := privateDir("API socket directory", filepath.Dir(conf.Socket)); err != nil {
		return err
	}
	d, err := supervisor.New(conf, opts, log)
	if err != nil {
		return err
	}
	if err := d.LockDataDir(); err != nil {
		return err
	}
	srv := &api.Server{Backend: d.API(), Log: log, Version: api.Version{Version: version, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}}
	if err := srv.Listen(conf.Socket); err != nil {
		return err
	}
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	apiErr := make(chan error, 1)
	go func() { apiErr <- srv.Serve(apiCtx, conf.Socket) }()
	log.Info("local API listening", "socket", conf.Socket)
	// The state database is checked (and replaced if damaged) before the
	// hub opens its tables in it.
	if err := d.OpenState(); err != nil {
		return err
	}
	relay := &orderRelay{}
	node := devmetrics.ProcNode{MemoryCgroup: cgroups.V1MemoryMount(), FsPath: conf.DataDir}
	summary := devmetrics.NewCollector(d.Metrics(), devmetrics.Options{Node: node})
	hub, closeHub, err := attachUplink(conf.Hub, conf.Objects, conf.NodeName, conf.DataDir, d.Assignments(), d, relay.take, d.API(), summary.Summary, log)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer closeHub()
	if err := serveMetrics(apiCtx, conf.Metrics, d.Metrics(), node, hub, log); err != nil {
		return err
	}
	// A self-update ends the daemon's loop as a plain exit does, pods
	// left running, and the command then executes the launcher.
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	var restarting atomic.Bool
	restart := func() { restarting.Store(true); d.Restart(); endRun() }
	u, err := startUpdater(runCtx, conf, d, hub, restart, log)
	if err != nil {
		return err
	}
	relay.attach(runCtx, u)
	drainOnShutdown(ctx, d.API(), supervisor.ShutdownTime(conf), log)
	go releaseAfterStartup(ctx, d.Supervising(), log)
	runErr := d.Run(runCtx)
	stopAPI()
	if runErr != nil {
		return runErr
	}
	err = nil
	select {
	case err = <-apiErr:
	case <-time.After(2 * time.Second):
	}
	if restarting.Load() {
		return errRelaunch // the socket is closed: the next daemon listens on it
	}
	return err
}

// drainOnShutdown stops the pods by priority when the machine announces
// it is going down, taking need at most.
func drainOnShutdown(ctx context.Context, d api.Backend, need time.Duration, log *slog.Logger) {
	// SIGPWR is how a UPS daemon or init without systemd announces a
	// power loss: stop pods by priority while there is time.
	power := make(chan os.Signal, 1)
	signal.Notify(power, syscall.SIGPWR)
	go func() {
		for range power {
			log.Warn("SIGPWR: draining the node")
			if err := d.Drain("SIGPWR"); err != nil {
				log.Error("drain", "err", err)
			}
		}
	}()
	if logind.Available() {
		// With systemd, a shutdown is announced by logind: hold it with
		// a delay lock until the pods are stopped.
		w := &logind.Watcher{Node: d, Log: log, Need: need}
		go w.Run(ctx)
	}
}
