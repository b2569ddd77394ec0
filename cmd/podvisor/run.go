package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/logind"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// fileConfig is the --config file. Flags given on the command line win.
type fileConfig struct {
	Manifests      string           `json:"manifests,omitempty"`
	DataDir        string           `json:"dataDir,omitempty"`
	Socket         string           `json:"socket,omitempty"`
	NodeName       string           `json:"nodeName,omitempty"`
	Shim           string           `json:"shim,omitempty"`
	ManifestResync *metav1.Duration `json:"manifestResync,omitempty"`
	Backoff        struct {
		Initial *metav1.Duration `json:"initial,omitempty"`
		Max     *metav1.Duration `json:"max,omitempty"`
		Reset   *metav1.Duration `json:"reset,omitempty"`
	} `json:"backoff"`
	Logs struct {
		MaxSize  *resource.Quantity `json:"maxSize,omitempty"`
		MaxFiles int                `json:"maxFiles,omitempty"`
	} `json:"logs"`
	ConfigDir                        string `json:"configDir,omitempty"`
	ShutdownGracePeriodByPodPriority []struct {
		Priority                   int32 `json:"priority"`
		ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
	} `json:"shutdownGracePeriodByPodPriority,omitempty"`
	Node struct {
		MaxPods          int64           `json:"maxPods,omitempty"`
		SystemReserved   v1.ResourceList `json:"systemReserved,omitempty"`
		PodvisorReserved v1.ResourceList `json:"podvisorReserved,omitempty"`
	} `json:"node"`
	Eviction struct {
		Hard                     map[string]string `json:"hard,omitempty"`
		Soft                     map[string]string `json:"soft,omitempty"`
		SoftGracePeriod          map[string]string `json:"softGracePeriod,omitempty"`
		MinimumReclaim           map[string]string `json:"minimumReclaim,omitempty"`
		MaxPodGracePeriod        *metav1.Duration  `json:"maxPodGracePeriod,omitempty"`
		PressureTransitionPeriod *metav1.Duration  `json:"pressureTransitionPeriod,omitempty"`
		MonitorPeriod            *metav1.Duration  `json:"monitorPeriod,omitempty"`
	} `json:"eviction"`
	Cgroups struct {
		Root   *string `json:"root,omitempty"`
		Mount  string  `json:"mount,omitempty"`
		Driver string  `json:"driver,omitempty"`
	} `json:"cgroups"`
	GC struct {
		MaxDeadPerContainer *int `json:"maxDeadPerContainer,omitempty"`
		MaxDeadContainers   *int `json:"maxDeadContainers,omitempty"`
	} `json:"gc"`
	Security struct {
		ForbidPrivileged bool     `json:"forbidPrivileged,omitempty"`
		AllowedHostPaths []string `json:"allowedHostPaths,omitempty"`
	} `json:"security"`
	Containerd struct {
		Address          string `json:"address,omitempty"`
		Plugin           string `json:"plugin,omitempty"`
		Snapshotter      string `json:"snapshotter,omitempty"`
		Runtime          string `json:"runtime,omitempty"`
		RegistryAuthFile string `json:"registryAuthFile,omitempty"`
		RuncRoot         string `json:"runcRoot,omitempty"`
		// NoPivotRoot: runc enters containers' roots by chroot, for
		// devices whose root file system is an initramfs.
		NoPivotRoot bool   `json:"noPivotRoot,omitempty"`
		SandboxDir  string `json:"sandboxDir,omitempty"`
		CNIConfDir  string `json:"cniConfDir,omitempty"`
		CNIBinDirs  string `json:"cniBinDirs,omitempty"`
		// Managed: podvisor runs containerd itself, with its own
		// socket (address), root and state.
		ImageFS string `json:"imageFS,omitempty"`
		ImageGC struct {
			HighThresholdPercent *int             `json:"highThresholdPercent,omitempty"`
			LowThresholdPercent  *int             `json:"lowThresholdPercent,omitempty"`
			MinimumAge           *metav1.Duration `json:"minimumAge,omitempty"`
		} `json:"imageGC"`
		Managed bool   `json:"managed,omitempty"`
		Root    string `json:"root,omitempty"`
		State   string `json:"state,omitempty"`
	} `json:"containerd"`
	Hub hubConfig `json:"hub"`
}

func defaultConfig() fileConfig {
	c := fileConfig{Manifests: "/etc/podvisor/manifests", DataDir: "/var/lib/podvisor", Socket: defaultSocket}
	c.Logs.MaxFiles = 5
	return c
}

func loadConfig(path string, into *fileConfig) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (YAML)")
	manifests := fs.String("manifests", "", "manifest directory (default /etc/podvisor/manifests)")
	dataDir := fs.String("data-dir", "", "state directory (default /var/lib/podvisor)")
	socket := fs.String("socket", "", "API socket (default "+defaultSocket+")")
	stopPods := fs.Bool("stop-pods-on-exit", false, "stop every pod gracefully when the daemon exits")
	verbose := fs.Bool("v", false, "log debug messages")
	hubURL := fs.String("hub", "", "hub broker, mqtt://HOST:PORT or mqtts://HOST:PORT (config hub.url)")
	deviceID := fs.String("device-id", "", "this device's ID at the hub (config hub.deviceId; default the node name)")
	hubKey := fs.String("hub-key", "", "the hub's public key, hub.pub from podhub init (config hub.key)")
	if pos, err := parseInterspersed(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("run: unexpected argument %q", pos[0])
	}
	fc := defaultConfig()
	if *configPath != "" {
		if err := loadConfig(*configPath, &fc); err != nil {
			return err
		}
	}
	for flagValue, field := range map[*string]*string{manifests: &fc.Manifests, dataDir: &fc.DataDir, socket: &fc.Socket,
		hubURL: &fc.Hub.URL, deviceID: &fc.Hub.DeviceID, hubKey: &fc.Hub.Key} {
		if *flagValue != "" {
			*field = *flagValue
		}
	}
	cfg, err := daemonConfig(fc)
	if err != nil {
		return err
	}
	cfg.StopPodsOnExit = *stopPods
	if os.Getenv("GOMAXPROCS") == "" {
		// The daemon waits on events and does little computing at a
		// time; one P avoids the scheduler handing wake-ups between
		// threads. Measured with make bench: 100 TCP probes a second
		// cost 2.1% of a core with two Ps, 1.15% with one.
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		// The daemon's heap is a few MiB; collecting at 50% growth
		// instead of 100% costs little CPU and keeps ~2 MiB less
		// resident on a device where every MiB counts.
		debug.SetGCPercent(50)
	}

	if path := os.Getenv("PODVISOR_CPUPROFILE"); path != "" {
		// For measuring the daemon itself: a pprof CPU profile until exit.
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("PODVISOR_CPUPROFILE: %w", err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// The order matters: the directories are checked, then the data
	// directory's lock is taken, then the socket's; only then is anything
	// opened or replaced, so a second daemon fails without disturbing the
	// first one's socket or state.
	if err := privateDir("data directory", cfg.DataDir); err != nil {
		return err
	}
	if err := privateDir("API socket directory", filepath.Dir(fc.Socket)); err != nil {
		return err
	}
	d := supervisor.New(cfg, log)
	if err := d.LockDataDir(); err != nil {
		return err
	}
	srv := &api.Server{Backend: d, Log: log, Version: api.Version{Version: version, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}}
	if err := srv.Listen(fc.Socket); err != nil {
		return err
	}
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	apiErr := make(chan error, 1)
	go func() { apiErr <- srv.Serve(apiCtx, fc.Socket) }()
	log.Info("local API listening", "socket", fc.Socket)
	// The state database is checked (and replaced if damaged) before the
	// hub opens its tables in it.
	if err := d.OpenState(); err != nil {
		return err
	}
	closeHub, err := attachHub(fc.Hub, cfg.NodeName, cfg.DataDir, d, log)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer closeHub()

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
		w := &logind.Watcher{Node: d, Log: log, Need: supervisor.ShutdownTime(cfg.ShutdownBuckets)}
		go w.Run(ctx)
	}
	runErr := d.Run(ctx)
	stopAPI()
	if runErr != nil {
		return runErr
	}
	select {
	case err := <-apiErr:
		return err
	case <-time.After(2 * time.Second):
		return nil
	}
}

func daemonConfig(fc fileConfig) (supervisor.Config, error) {
	shimCmd, err := shimCommand(fc.Shim)
	if err != nil {
		return supervisor.Config{}, err
	}
	node := fc.NodeName
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return supervisor.Config{}, err
		}
	}
	lc := lifecycle.DefaultConfig()
	for _, d := range []struct {
		name string
		v    *metav1.Duration
		into *time.Duration
	}{{"backoff.initial", fc.Backoff.Initial, &lc.BackoffInitial}, {"backoff.max", fc.Backoff.Max, &lc.BackoffMax},
		{"backoff.reset", fc.Backoff.Reset, &lc.BackoffReset}} {
		if d.v == nil {
			continue
		}
		if d.v.Duration <= 0 {
			return supervisor.Config{}, fmt.Errorf("config %s: must be a positive duration, got %s", d.name, d.v.Duration)
		}
		*d.into = d.v.Duration
	}
	if lc.BackoffInitial > lc.BackoffMax {
		return supervisor.Config{}, fmt.Errorf("config backoff.initial (%s) is longer than backoff.max (%s)", lc.BackoffInitial, lc.BackoffMax)
	}
	resync := time.Minute
	if fc.ManifestResync != nil {
		resync = fc.ManifestResync.Duration
	}
	maxBytes := int64(10 << 20)
	if q := fc.Logs.MaxSize; q != nil {
		if maxBytes = q.Value(); maxBytes < 4096 {
			return supervisor.Config{}, fmt.Errorf("config logs.maxSize: %s is below the 4Ki minimum", q)
		}
	}
	if fc.Logs.MaxFiles < 1 {
		return supervisor.Config{}, fmt.Errorf("config logs.maxFiles: must be at least 1, got %d", fc.Logs.MaxFiles)
	}
	perContainer, device := 1, 100
	if v := fc.GC.MaxDeadPerContainer; v != nil {
		if perContainer = *v; perContainer < 1 {
			return supervisor.Config{}, fmt.Errorf("config gc.maxDeadPerContainer: must be at least 1 (logs --previous needs it), got %d", *v)
		}
	}
	if v := fc.GC.MaxDeadContainers; v != nil {
		if device = *v; device < 0 {
			return supervisor.Config{}, fmt.Errorf("config gc.maxDeadContainers: must be >= 0 (0: no device-wide bound), got %d", *v)
		}
	}
	cgRoot, cgMount := "podvisor", "/sys/fs/cgroup"
	if fc.Cgroups.Root != nil {
		cgRoot = *fc.Cgroups.Root
	}
	if fc.Cgroups.Mount != "" {
		cgMount = fc.Cgroups.Mount
	}
	switch fc.Cgroups.Driver {
	case "", "cgroupfs", "systemd":
	default:
		return supervisor.Config{}, fmt.Errorf("config cgroups.driver: %q is neither cgroupfs nor systemd", fc.Cgroups.Driver)
	}
	hard := eviction.DefaultHard()
	if fc.Eviction.Hard != nil {
		hard = fc.Eviction.Hard // as in the kubelet, setting any drops the defaults
	}
	ev := fc.Eviction
	if _, err := eviction.Parse(hard, ev.Soft, ev.SoftGracePeriod, ev.MinimumReclaim); err != nil {
		return supervisor.Config{}, fmt.Errorf("config %w", err)
	}
	evCfg := supervisor.EvictionConfig{Hard: hard, Soft: ev.Soft, SoftGracePeriod: ev.SoftGracePeriod,
		MinimumReclaim: ev.MinimumReclaim, PressureTransitionPeriod: 5 * time.Minute, MonitorPeriod: 10 * time.Second}
	if ev.MaxPodGracePeriod != nil {
		evCfg.MaxPodGracePeriod = ev.MaxPodGracePeriod.Duration
	}
	if ev.PressureTransitionPeriod != nil {
		evCfg.PressureTransitionPeriod = ev.PressureTransitionPeriod.Duration
	}
	if ev.MonitorPeriod != nil {
		if ev.MonitorPeriod.Duration < 100*time.Millisecond {
			return supervisor.Config{}, fmt.Errorf("config eviction.monitorPeriod: %s is below 100ms", ev.MonitorPeriod.Duration)
		}
		evCfg.MonitorPeriod = ev.MonitorPeriod.Duration
	}
	maxPods := fc.Node.MaxPods
	if maxPods == 0 {
		maxPods = 110
	}
	if maxPods < 0 {
		return supervisor.Config{}, fmt.Errorf("config node.maxPods: must be positive, got %d", maxPods)
	}
	var buckets []supervisor.ShutdownBucket
	for i, b := range fc.ShutdownGracePeriodByPodPriority {
		if b.ShutdownGracePeriodSeconds < 0 {
			return supervisor.Config{}, fmt.Errorf("config shutdownGracePeriodByPodPriority[%d].shutdownGracePeriodSeconds: must be >= 0", i)
		}
		buckets = append(buckets, supervisor.ShutdownBucket{Priority: b.Priority, GracePeriod: time.Duration(b.ShutdownGracePeriodSeconds) * time.Second})
	}
	configDir := fc.ConfigDir
	if configDir == "" {
		configDir = "/etc/podvisor"
	}
	ctrd, err := containerdConfig(fc, shimCmd)
	if err != nil {
		return supervisor.Config{}, err
	}
	hubPods, err := hubPodPolicy(fc.Hub)
	if err != nil {
		return supervisor.Config{}, err
	}
	return supervisor.Config{
		Containerd:      ctrd,
		Policy:          supervisor.Policy{ForbidPrivileged: fc.Security.ForbidPrivileged, AllowedHostPaths: fc.Security.AllowedHostPaths, Hub: hubPods},
		ConfigDir:       configDir,
		Eviction:        evCfg,
		ShutdownBuckets: buckets,
		Node: supervisor.NodeConfig{MaxPods: maxPods, SystemReserved: fc.Node.SystemReserved,
			PodvisorReserved: fc.Node.PodvisorReserved, EvictionHard: hard, Version: version},
		CgroupRoot:          cgRoot,
		CgroupMount:         cgMount,
		CgroupDriver:        fc.Cgroups.Driver,
		MaxDeadPerContainer: perContainer,
		MaxDeadContainers:   device,
		ManifestDir:         fc.Manifests,
		DataDir:             fc.DataDir,
		NodeName:            node,
		ShimCommand:         shimCmd,
		Lifecycle:           lc,
		ManifestResync:      resync,
		ManifestSettle:      5 * time.Millisecond,
		LogMaxBytes:         maxBytes,
		LogMaxFiles:         fc.Logs.MaxFiles,
		PersistDelay:        100 * time.Millisecond,
	}, nil
}

// shimCommand finds the per-container shim: the configured path, else
// podvisor-shim beside this binary, else this binary's own "shim" command
// (which works but costs about 1 MiB more per container).
func shimCommand(configured string) ([]string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return nil, fmt.Errorf("config shim: %w", err)
		}
		return []string{configured}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding own binary: %w", err)
	}
	beside := filepath.Join(filepath.Dir(exe), "podvisor-shim")
	if st, err := os.Stat(beside); err == nil && st.Mode()&0o111 != 0 {
		return []string{beside}, nil
	}
	return []string{exe, "shim"}, nil
}

// defaultContainerd is containerd's own socket.
const defaultContainerd = "/run/containerd/containerd.sock"

// containerdConfig enables containerd pods where containerd is named in
// the config, or its default socket exists. They need podvisor-containerd
// (the plugin) and podvisor-shim (the log driver) beside this binary.
func containerdConfig(fc fileConfig, shimCmd []string) (supervisor.ContainerdConfig, error) {
	cc := fc.Containerd
	cfg := supervisor.ContainerdConfig{Address: cc.Address, Snapshotter: cc.Snapshotter, Runtime: cc.Runtime,
		AuthFile: cc.RegistryAuthFile, RuncRoot: cc.RuncRoot, NoPivotRoot: cc.NoPivotRoot, SandboxDir: cc.SandboxDir, ConnectWait: 5 * time.Second,
		CNIConfDir: cc.CNIConfDir, CNIBinDirs: cc.CNIBinDirs}
	if cc.Managed {
		bin, err := exec.LookPath("containerd")
		if err != nil {
			return cfg, errors.New("config containerd.managed: containerd is not installed")
		}
		if cfg.Address == "" {
			cfg.Address = "/run/podvisor/containerd/containerd.sock"
		}
		m := &supervisor.ManagedContainerd{Binary: bin, Root: cc.Root, State: cc.State,
			Log: filepath.Join(fc.DataDir, "containerd", "containerd.log")}
		if m.Root == "" {
			m.Root = filepath.Join(fc.DataDir, "containerd", "root")
		}
		if m.State == "" {
			m.State = "/run/podvisor/containerd/state"
		}
		cfg.Managed = m
	}
	if cfg.Address == "" {
		// A containerd section in the config means containerd is wanted,
		// even if it is not up yet (podvisor may start first at boot).
		if _, err := os.Stat(defaultContainerd); err != nil && cc == (fileConfig{}).Containerd {
			return supervisor.ContainerdConfig{}, nil // no containerd here: process pods only
		}
		cfg.Address = defaultContainerd
	}
	cfg.ImageGC = supervisor.ImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: 2 * time.Minute}
	if v := cc.ImageGC.MinimumAge; v != nil {
		cfg.ImageGC.MinimumAge = v.Duration
	}
	if v := cc.ImageGC.HighThresholdPercent; v != nil {
		cfg.ImageGC.HighThresholdPercent = *v
	}
	if v := cc.ImageGC.LowThresholdPercent; v != nil {
		cfg.ImageGC.LowThresholdPercent = *v
	}
	if g := cfg.ImageGC; g.HighThresholdPercent < 0 || g.HighThresholdPercent > 100 || g.LowThresholdPercent < 0 || g.LowThresholdPercent > g.HighThresholdPercent {
		return cfg, fmt.Errorf("config containerd.imageGC: want 0 <= lowThresholdPercent (%d) <= highThresholdPercent (%d) <= 100; 100 disables it",
			g.LowThresholdPercent, g.HighThresholdPercent)
	}
	switch {
	case cc.ImageFS != "":
		cfg.ImageFS = cc.ImageFS
	case cfg.Managed != nil:
		cfg.ImageFS = filepath.Dir(cfg.Managed.Root)
	default:
		cfg.ImageFS = "/var/lib/containerd" // containerd's default root
		if _, err := os.Stat(cfg.ImageFS); err != nil {
			cfg.ImageFS = ""
		}
	}
	if cfg.SandboxDir == "" {
		cfg.SandboxDir = "/run/podvisor/sandbox"
	}
	plugin := cc.Plugin
	if plugin == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("finding own binary: %w", err)
		}
		plugin = filepath.Join(filepath.Dir(exe), "podvisor-containerd")
	}
	if _, err := os.Stat(plugin); err != nil {
		return cfg, fmt.Errorf("config containerd: the runtime plugin: %w", err)
	}
	if len(shimCmd) != 1 {
		return cfg, errors.New("config containerd: containerd pods need podvisor-shim (their log driver) beside podvisor, or the shim setting")
	}
	cfg.Plugin, cfg.LogDriver = []string{plugin}, shimCmd[0]
	cfg.PodInit = []string{shimCmd[0], shim.PodInitFlag}
	return cfg, nil
}
