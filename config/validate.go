package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/podsecurity"
)

// Error is a config Validate refuses: every bad setting, and the file.
type Error struct {
	File   string // "" for a config without a file
	Fields []FieldError
}

// FieldError is one bad setting, named by its path in the file
// ("backoff.initial", "hub.images.registries[1]").
type FieldError struct {
	Field string
	Err   error
}

func (e *Error) Error() string {
	where := "config"
	if e.File != "" {
		where += " " + e.File
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Err.Error()
	}
	return where + ": " + strings.Join(parts, "; ")
}

// Unwrap returns the settings' own errors.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Fields))
	for i, f := range e.Fields {
		errs[i] = f.Err
	}
	return errs
}

// FieldError is an error about one setting of c, worded as Validate's:
// for checks that need the host (a file that must exist), which Validate
// leaves to the caller.
func (c *Config) FieldError(field string, err error) error {
	return &Error{File: c.File, Fields: []FieldError{{field, err}}}
}

// MinLogSize is the smallest logs.maxSize: a log line must fit.
const MinLogSize = 4096

// MinMonitorPeriod is the shortest eviction.monitorPeriod.
const MinMonitorPeriod = 100 * time.Millisecond

// Validate checks every setting that can be checked without the host, and
// returns an *Error naming each bad one, or nil. Settings that cannot go
// together are refused here, before anything starts.
func (c *Config) Validate() error {
	v := &validation{}
	for _, p := range []struct{ field, value string }{{"manifests", c.Manifests}, {"dataDir", c.DataDir}, {"socket", c.Socket}} {
		if p.value == "" {
			v.add(p.field, "must be a path")
		}
	}
	v.positive("manifestResync", c.ManifestResync.Duration)
	v.positive("backoff.initial", c.Backoff.Initial.Duration)
	v.positive("backoff.max", c.Backoff.Max.Duration)
	v.positive("backoff.reset", c.Backoff.Reset.Duration)
	if b := c.Backoff; b.Initial.Duration > b.Max.Duration && b.Max.Duration > 0 {
		v.add("backoff.initial", "%s is longer than backoff.max (%s)", b.Initial.Duration, b.Max.Duration)
	}
	if q := c.Logs.MaxSize; q.Value() < MinLogSize {
		v.add("logs.maxSize", "%s is below the 4Ki minimum", q.String())
	}
	if n := c.Logs.MaxFiles; n < 1 {
		v.add("logs.maxFiles", "must be at least 1, got %d", n)
	}
	if n := c.GC.MaxDeadPerContainer; n < 1 {
		v.add("gc.maxDeadPerContainer", "must be at least 1 (logs --previous needs it), got %d", n)
	}
	if n := c.GC.MaxDeadContainers; n < 0 {
		v.add("gc.maxDeadContainers", "must be >= 0 (0: no device-wide bound), got %d", n)
	}
	switch c.Cgroups.Driver {
	case "", "cgroupfs", "systemd":
	default:
		v.add("cgroups.driver", "%q is neither cgroupfs nor systemd", c.Cgroups.Driver)
	}
	if c.Cgroups.Mount == "" {
		v.add("cgroups.mount", "must be a path")
	}
	if n := c.Node.MaxPods; n <= 0 {
		v.add("node.maxPods", "must be positive, got %d", n)
	}
	for i, b := range c.ShutdownGracePeriodByPodPriority {
		if b.ShutdownGracePeriodSeconds < 0 {
			v.add(fmt.Sprintf("shutdownGracePeriodByPodPriority[%d].shutdownGracePeriodSeconds", i), "must be >= 0, got %d", b.ShutdownGracePeriodSeconds)
		}
	}
	switch string(c.Probes.Listen) {
	case "", string(ListenEBPF), string(ListenSockDiag), string(ListenOff):
		if c.Probes.Listen == ListenEBPF && !c.Probes.EBPF {
			v.add("probes.listen", "ebpf contradicts probes.ebpf: false (drop probes.ebpf)")
		}
	default:
		v.add("probes.listen", "%q is none of ebpf, sockdiag, off", c.Probes.Listen)
	}
	c.validateEviction(v)
	c.validateContainerd(v)
	c.validateHub(v)
	c.validateObjects(v)
	c.validateFirmware(v)
	c.validateMetrics(v)
	if d := c.Update.CommitTimeout.Duration; d < 10*time.Second || d > 24*time.Hour {
		v.add("update.commitTimeout", "%s: want 10s to 24h", d)
	}
	if len(v.fields) == 0 {
		return nil
	}
	return &Error{File: c.File, Fields: v.fields}
}

// EvictionHard is the hard eviction thresholds in effect: the kubelet's
// defaults unless the config sets any.
func (c *Config) EvictionHard() map[string]string {
	if c.Eviction.Hard == nil {
		return eviction.DefaultHard()
	}
	return c.Eviction.Hard
}

// evictionFields maps the kubelet's names in eviction.Parse's errors to
// this file's.
var evictionFields = strings.NewReplacer("evictionHard", "eviction.hard", "evictionSoftGracePeriod", "eviction.softGracePeriod",
	"evictionSoft", "eviction.soft", "evictionMinimumReclaim", "eviction.minimumReclaim")

func (c *Config) validateEviction(v *validation) {
	ev := c.Eviction
	if _, err := eviction.Parse(c.EvictionHard(), ev.Soft, ev.SoftGracePeriod, ev.MinimumReclaim); err != nil {
		field, msg, ok := strings.Cut(err.Error(), ": ")
		if !ok {
			field, msg = "eviction", err.Error()
		}
		v.fields = append(v.fields, FieldError{evictionFields.Replace(field), errors.New(evictionFields.Replace(msg))})
	}
	v.nonNegative("eviction.maxPodGracePeriod", ev.MaxPodGracePeriod.Duration)
	v.nonNegative("eviction.pressureTransitionPeriod", ev.PressureTransitionPeriod.Duration)
	if p := ev.MonitorPeriod.Duration; p < MinMonitorPeriod {
		v.add("eviction.monitorPeriod", "%s is below %s", p, MinMonitorPeriod)
	}
}

func (c *Config) validateContainerd(v *validation) {
	g := c.Containerd.ImageGC
	if g.HighThresholdPercent < 0 || g.HighThresholdPercent > 100 || g.LowThresholdPercent < 0 || g.LowThresholdPercent > g.HighThresholdPercent {
		v.add("containerd.imageGC", "want 0 <= lowThresholdPercent (%d) <= highThresholdPercent (%d) <= 100; 100 disables it",
			g.LowThresholdPercent, g.HighThresholdPercent)
	}
	v.nonNegative("containerd.imageGC.minimumAge", g.MinimumAge.Duration)
	if c.Containerd.SandboxDir == "" {
		v.add("containerd.sandboxDir", "must be a path")
	}
	if g := c.Containerd.ShimGroup; g != ShimGroupDevice && g != ShimGroupPod && g != ShimGroupContainer {
		v.add("containerd.shimGroup", "%q: want %s, %s or %s", g, ShimGroupDevice, ShimGroupPod, ShimGroupContainer)
	}
}

// maxHubBrokers bounds a device's broker URLs: the nodes of one cluster
// it may move between.
const maxHubBrokers = 16

func (c *Config) validateHub(v *validation) {
	h := c.Hub
	field := "hub.url"
	if h.URL != "" && len(h.URLs) > 0 {
		v.add("hub.urls", "set hub.url (or --hub) or hub.urls, not both")
	} else if len(h.URLs) > 0 {
		field = "hub.urls"
	}
	if len(h.URLs) > maxHubBrokers || len(h.Brokers()) > maxHubBrokers {
		v.add(field, "%d brokers: at most %d", len(h.Brokers()), maxHubBrokers)
	}
	scheme := ""
	for _, u := range h.Brokers() {
		s, _, _ := strings.Cut(u, "://")
		switch {
		case s != "mqtt" && s != "mqtts" || !strings.Contains(u, "://"):
			v.add(field, "%q: want mqtt://HOST:PORT or mqtts://HOST:PORT", u)
		case scheme != "" && s != scheme:
			// A device must not fall back to a plain connection when its
			// TLS brokers fail, nor the other way round.
			v.add(field, "%q: every broker must be mqtts:// or every one mqtt://, not both", u)
		}
		if scheme == "" {
			scheme = s
		}
	}
	if len(h.Brokers()) == 0 && (h.URL != "" || len(h.URLs) > 0) {
		v.add(field, "no broker URL")
	}
	if h.AllowUnsigned && h.Key != "" {
		// Either would decide alone: an unsigned document would pass, and
		// its generation would make the real hub's documents look stale.
		v.add("hub.allowUnsigned", "true cannot be combined with hub.key (or --hub-key) %s: "+
			"documents signed with that key would not be required; remove one of them", h.Key)
	}
	v.nonNegative("hub.heartbeat", h.Heartbeat.Duration)
	if n := h.Outbox.MaxRows; n < 0 {
		v.add("hub.outbox.maxRows", "must be >= 0 (0: the default), got %d", n)
	}
	if q := h.Outbox.MaxBytes; q.Sign() < 0 {
		v.add("hub.outbox.maxBytes", "must be >= 0 (0: the default), got %s", q.String())
	}
	if _, err := h.PodPolicy(0); err != nil {
		var field *podsecurity.ConfigError
		if errors.As(err, &field) {
			v.fields = append(v.fields, FieldError{"hub." + field.Field, field.Err})
		} else {
			v.fields = append(v.fields, FieldError{"hub", err})
		}
	}
}

// validateObjects checks the bounds on ConfigMaps and Secrets.
func (c *Config) validateObjects(v *validation) {
	if n := c.Objects.MaxObjects; n < 0 {
		v.add("objects.maxObjects", "must be >= 0 (0: the default), got %d", n)
	}
	if q := c.Objects.MaxBytes; q.Sign() < 0 {
		v.add("objects.maxBytes", "must be >= 0 (0: the default), got %s", q.String())
	}
}

// MinCommitDeadline is the shortest firmware.commitDeadline: a boot's
// health check needs the pods adopted and the hub reached.
const MinCommitDeadline = 10 * time.Second

// FirmwareRebootNever leaves the reboot into an installed bundle to the
// device's owner.
const FirmwareRebootNever = "never"

func (c *Config) validateFirmware(v *validation) {
	f := c.Firmware
	switch f.Driver {
	case "", FirmwareDriverRAUC, FirmwareDriverSWUpdate:
	default:
		v.add("firmware.driver", "%q: want rauc, swupdate or \"\" (none)", f.Driver)
	}
	if d := f.CommitDeadline.Duration; d < MinCommitDeadline {
		v.add("firmware.commitDeadline", "%s is below %s", d, MinCommitDeadline)
	}
	switch f.Reboot {
	case "", FirmwareRebootNever:
	default:
		v.add("firmware.reboot", "%q: want \"\" (auto) or never", f.Reboot)
	}
	if len(f.RebootCommand) > 0 && (f.Reboot == FirmwareRebootNever || !filepath.IsAbs(f.RebootCommand[0])) {
		v.add("firmware.rebootCommand", "%q: want an absolute program path, and firmware.reboot not never", f.RebootCommand)
	}
	if f.StateDir != "" && !filepath.IsAbs(f.StateDir) {
		v.add("firmware.stateDir", "%q: must be an absolute path", f.StateDir)
	}
	// A driver's settings without that driver are a mistake, not a no-op.
	if f.RAUC != (FirmwareRAUC{}) && f.Driver != FirmwareDriverRAUC {
		v.add("firmware.rauc", "set, but firmware.driver is %q, not rauc", f.Driver)
	}
	if f.SWUpdate != (FirmwareSWUpdate{}) && f.Driver != FirmwareDriverSWUpdate {
		v.add("firmware.swupdate", "set, but firmware.driver is %q, not swupdate", f.Driver)
	}
	if b := f.RAUC.Bus; b != "" {
		if kind, _, ok := strings.Cut(b, ":"); !ok || (kind != "unix" && kind != "tcp") {
			v.add("firmware.rauc.bus", "%q: want a D-Bus address such as unix:path=/run/dbus/system_bus_socket", b)
		}
	}
	for _, p := range []struct{ field, path string }{{"firmware.swupdate.controlSocket", f.SWUpdate.ControlSocket},
		{"firmware.swupdate.progressSocket", f.SWUpdate.ProgressSocket}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			v.add(p.field, "%q: must be an absolute path", p.path)
		}
	}
	if s := f.SWUpdate.Select; s != "" {
		if set, mode, ok := strings.Cut(s, ","); !ok || set == "" || mode == "" || strings.Contains(mode, ",") || len(set) > 255 || len(mode) > 255 {
			v.add("firmware.swupdate.select", "%q: want SOFTWARE_SET,MODE as swupdate -e takes it (e.g. stable,copy2)", s)
		}
	}
}

// PodPolicy is what the hub may run here. daemonUID is the uid a process
// pod runs as when it names none.
func (h *Hub) PodPolicy(daemonUID int64) (*podsecurity.Policy, error) {
	return podsecurity.New(podsecurity.Config{Level: h.PodSecurity, Version: h.PodSecurityVersion,
		AllowProcessPods: h.AllowProcessPods, AllowRootProcessPods: h.AllowRootProcessPods, DefaultUID: daemonUID,
		Images: podsecurity.ImageConfig{Registries: h.Images.Registries, RequireDigest: h.Images.RequireDigest, Shared: h.Images.Shared}})
}

// validation collects the bad settings.
type validation struct{ fields []FieldError }

func (v *validation) add(field, format string, args ...any) {
	v.fields = append(v.fields, FieldError{field, fmt.Errorf(format, args...)})
}

func (v *validation) positive(field string, d time.Duration) {
	if d <= 0 {
		v.add(field, "must be a positive duration, got %s", d)
	}
}

func (v *validation) nonNegative(field string, d time.Duration) {
	if d < 0 {
		v.add(field, "must not be negative, got %s", d)
	}
}
