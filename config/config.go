// Package config is podvisor's configuration file (--config): its schema,
// the default of every setting, strict loading and Validate.
//
// It holds settings, not the daemon: it imports neither the supervisor
// shell nor sync/, only the pure deciders whose rules a setting must meet
// (eviction thresholds, the hub's pod security policy, the lifecycle's
// backoff defaults), so anything may read a config without linking the
// daemon. cmd/podvisor turns a validated Config into the daemon's and the
// hub agent's inputs.
//
// As with etcd's embed.Config, Default returns every setting at its
// default, Load decodes a file over the defaults, command-line flags are
// applied after it, and Validate checks the result: every error names the
// file and the field.
package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// Paths the daemon uses unless the config or a flag names others.
const (
	DefaultManifests = "/etc/podvisor/manifests"
	DefaultDataDir   = "/var/lib/podvisor"
	DefaultSocket    = "/run/podvisor/podvisor.sock"
	DefaultConfigDir = "/etc/podvisor"
	// DefaultContainerdSocket is containerd's own socket.
	DefaultContainerdSocket = "/run/containerd/containerd.sock"
	// DefaultHubPrefix is the hub's topic prefix, the wire protocol's
	// (sync/protocol.DefaultPrefix, which a test holds it to).
	DefaultHubPrefix = "podvisor/v1"
	// DefaultManagedSocket and DefaultManagedState are where a containerd
	// podvisor runs itself listens and keeps its tasks.
	DefaultManagedSocket = "/run/podvisor/containerd/containerd.sock"
	DefaultManagedState  = "/run/podvisor/containerd/state"
	// DefaultContainerdRoot is containerd's own root, on the file system
	// its images are on.
	DefaultContainerdRoot = "/var/lib/containerd"
	// ShimGroupDevice and ShimGroupPod are the values of
	// containerd.shimGroup.
	ShimGroupDevice    = "device"
	ShimGroupPod       = "pod"
	ShimGroupContainer = "container"
)

// DefaultMaxPods is the kubelet's default; as in the kubelet, maxPods 0
// means it.
const DefaultMaxPods = 110

// Config is the config file. Field docs give each setting's default;
// docs/configuration.md's "Config file" section shows them all.
type Config struct {
	// File is where the config was loaded from ("" for none): errors
	// name it.
	File string `json:"-"`

	Manifests string `json:"manifests,omitempty"`
	DataDir   string `json:"dataDir,omitempty"`
	Socket    string `json:"socket,omitempty"`
	// NodeName defaults ("") to the host name.
	NodeName string `json:"nodeName,omitempty"`
	// Shim is the per-container shim; "" finds podvisor-shim beside
	// podvisor, else podvisor's own shim command.
	Shim string `json:"shim,omitempty"`
	// ManifestResync is the period of the full re-list of the manifests
	// directory behind its file events.
	ManifestResync Duration `json:"manifestResync"`
	Backoff        Backoff  `json:"backoff"`
	Logs           Logs     `json:"logs"`
	GC             GC       `json:"gc"`
	Cgroups        Cgroups  `json:"cgroups"`
	// ConfigDir holds priorityclasses/.
	ConfigDir string `json:"configDir,omitempty"`
	// ShutdownGracePeriodByPodPriority orders a node shutdown or drain;
	// by default (and when empty) 20 s for pods below priority
	// 2000000000, then 10 s for the critical ones.
	ShutdownGracePeriodByPodPriority []ShutdownGracePeriod `json:"shutdownGracePeriodByPodPriority,omitempty"`
	Node                             Node                  `json:"node"`
	Eviction                         Eviction              `json:"eviction"`
	Security                         Security              `json:"security"`
	Containerd                       Containerd            `json:"containerd"`
	Hub                              Hub                   `json:"hub"`
	Probes                           Probes                `json:"probes"`
	Process                          Process               `json:"process"`
	Firmware                         Firmware              `json:"firmware"`
	Update                           Update                `json:"update"`
	Objects                          Objects               `json:"objects"`
	Metrics                          Metrics               `json:"metrics"`

	// Set by podvisor, never by the file: StopPodsOnExit (podvisor run
	// --stop-pods-on-exit) stops every pod gracefully before the daemon
	// exits; ManifestSettle is how long a manifest file must be quiet
	// after a write before it is read; SaveDelay batches the state writes
	// no action waits on, as flash storage wears per write.
	StopPodsOnExit bool          `json:"-"`
	ManifestSettle time.Duration `json:"-"`
	SaveDelay      time.Duration `json:"-"`

	// containerdNamed: the file sets something in its containerd section.
	containerdNamed bool
}

// Backoff are the crash-loop restart delays.
type Backoff struct {
	Initial Duration `json:"initial"`
	Max     Duration `json:"max"`
	// Reset: a container that ran this long starts its backoff over.
	Reset Duration `json:"reset"`
}

// Logs bound each container instance's log.
type Logs struct {
	MaxSize  resource.Quantity `json:"maxSize"`
	MaxFiles int               `json:"maxFiles"`
}

// GC bounds the finished container instances (directories and logs) kept.
type GC struct {
	// MaxDeadPerContainer is kept besides each container's current
	// instance (at least 1: logs --previous reads it).
	MaxDeadPerContainer int `json:"maxDeadPerContainer"`
	// MaxDeadContainers bounds them on the whole device (0: no bound).
	MaxDeadContainers int `json:"maxDeadContainers"`
}

// Cgroups is where the pods' cgroups go.
type Cgroups struct {
	// Root is the pods' cgroup under Mount; "" runs without cgroups.
	Root  string `json:"root"`
	Mount string `json:"mount,omitempty"`
	// Driver is cgroupfs or systemd (slices and scopes made through
	// systemd).
	Driver string `json:"driver,omitempty"`
}

// Process is how process pods run.
type Process struct {
	// Keeper (default true) runs every process container that has a
	// cgroup of its own under one keeper process per device
	// (podvisor-shim --keeper) instead of one shim each; false: a shim
	// per container.
	Keeper bool `json:"keeper"`
}

// Probes configures how probes learn that a container's port opened.
type Probes struct {
	// Listen is the best path tcpSocket, httpGet and grpc startup and
	// readiness probes may learn that their port opened or closed by, to
	// run at once: "ebpf" (the default; sock_ops programs, else sock_diag
	// where eBPF is refused), "sockdiag" (netlink dumps only) or "off"
	// (probes keep their periods only; YAML's unquoted off, a boolean
	// false, means it too). Where the chosen path does not work, the next
	// one down is taken.
	Listen ListenPath `json:"listen,omitempty"`
	// EBPF false is the older spelling of listen: sockdiag.
	EBPF bool `json:"ebpf"`
}

// ListenPath is a value of probes.listen.
type ListenPath string

// The values of probes.listen.
const (
	ListenEBPF     ListenPath = "ebpf"
	ListenSockDiag ListenPath = "sockdiag"
	ListenOff      ListenPath = "off"
)

// UnmarshalJSON takes a string, or false for off: YAML 1.1 reads an
// unquoted off as a boolean.
func (l *ListenPath) UnmarshalJSON(b []byte) error {
	if string(b) == "false" {
		*l = ListenOff
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("probes.listen: want ebpf, sockdiag or off, got %s", b)
	}
	*l = ListenPath(s)
	return nil
}

// ListenMode is the probes.listen in effect: Listen, else sockdiag when
// ebpf is false, else ebpf.
func (p Probes) ListenMode() ListenPath {
	switch {
	case p.Listen != "":
		return p.Listen
	case !p.EBPF:
		return ListenSockDiag
	}
	return ListenEBPF
}

// ShutdownGracePeriod is one step of a graceful node shutdown: pods from
// Priority up to the next step's get this long to stop.
type ShutdownGracePeriod struct {
	Priority                   int32 `json:"priority"`
	ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
}

// Node is how much of the device pods may use.
type Node struct {
	MaxPods int64 `json:"maxPods,omitempty"`
	// SystemReserved and PodvisorReserved are kept from pods, as the
	// kubelet's systemReserved and kubeReserved.
	SystemReserved   v1.ResourceList `json:"systemReserved,omitempty"`
	PodvisorReserved v1.ResourceList `json:"podvisorReserved,omitempty"`
}

// Eviction holds the kubelet's node-pressure eviction settings, in the
// kubelet's format (signal → "100Mi" or "10%").
type Eviction struct {
	// Hard nil is the kubelet's defaults (eviction.DefaultHard); as in
	// the kubelet, setting any threshold drops them all.
	Hard                     map[string]string `json:"hard,omitempty"`
	Soft                     map[string]string `json:"soft,omitempty"`
	SoftGracePeriod          map[string]string `json:"softGracePeriod,omitempty"`
	MinimumReclaim           map[string]string `json:"minimumReclaim,omitempty"`
	MaxPodGracePeriod        Duration          `json:"maxPodGracePeriod"`
	PressureTransitionPeriod Duration          `json:"pressureTransitionPeriod"`
	// MonitorPeriod is the safety-net check behind the kernel's events.
	MonitorPeriod Duration `json:"monitorPeriod"`
}

// Security is the device's policy for every pod, file and hub alike.
type Security struct {
	// ForbidPrivileged refuses privileged containers, hostPID and hostIPC.
	ForbidPrivileged bool `json:"forbidPrivileged,omitempty"`
	// AllowedHostPaths, when set, are the only host directories hostPath
	// volumes may name.
	AllowedHostPaths []string `json:"allowedHostPaths,omitempty"`
	// AllowUntrustedManifests reads manifest files that someone other
	// than root (or the daemon's user) could have written, with a
	// warning: whoever can write one can run pods as root, so by default
	// such a file, or one under such a directory or reached through such
	// a link, is refused (sshd's StrictModes).
	AllowUntrustedManifests bool `json:"allowUntrustedManifests,omitempty"`
}

// Containerd is how pods without runtimeClassName: process run. Empty
// paths are found on the host; see the fields.
type Containerd struct {
	// Address is containerd's socket: by default DefaultContainerdSocket,
	// or DefaultManagedSocket when Managed.
	Address string `json:"address,omitempty"`
	// Plugin is podvisor-containerd; "" finds it beside podvisor.
	Plugin           string `json:"plugin,omitempty"`
	Snapshotter      string `json:"snapshotter,omitempty"`
	Runtime          string `json:"runtime,omitempty"`
	RegistryAuthFile string `json:"registryAuthFile,omitempty"`
	// RegistryCertsDir holds registries' CAs, one directory per
	// host[:port] with *.crt files; "" is /etc/containerd/certs.d.
	RegistryCertsDir string `json:"registryCertsDir,omitempty"`
	RuncRoot         string `json:"runcRoot,omitempty"`
	// NoPivotRoot: runc enters containers' roots by chroot, for devices
	// whose root file system is an initramfs.
	NoPivotRoot bool `json:"noPivotRoot,omitempty"`
	// SandboxDir holds the pods' namespaces.
	SandboxDir string `json:"sandboxDir,omitempty"`
	// ShimGroup is which containers share one containerd shim
	// (containerd-shim-runc-v2): ShimGroupDevice, every container of the
	// device (one shim, ~10 MiB instead of ~2.7 MiB per container; a shim
	// crash ends them all), ShimGroupPod, each pod's containers, or
	// ShimGroupContainer, a shim per container (containerd's own default:
	// on containerd 1.x no container's exec or start waits for another's).
	ShimGroup string `json:"shimGroup,omitempty"`
	// CNIConfDir and CNIBinDirs locate the pod network.
	CNIConfDir string `json:"cniConfDir,omitempty"`
	CNIBinDirs string `json:"cniBinDirs,omitempty"`
	// ImageFS is a path on the file system containerd keeps images on:
	// by default the managed root's parent, or DefaultContainerdRoot if
	// it exists.
	ImageFS string  `json:"imageFS,omitempty"`
	ImageGC ImageGC `json:"imageGC"`
	// Managed: podvisor runs containerd itself, with its own socket
	// (Address), Root and State.
	Managed bool `json:"managed,omitempty"`
	// Root defaults to <dataDir>/containerd/root, State to
	// DefaultManagedState.
	Root  string `json:"root,omitempty"`
	State string `json:"state,omitempty"`
}

// ImageGC are the kubelet's image garbage collection thresholds, in
// percent of the image file system used.
type ImageGC struct {
	HighThresholdPercent int `json:"highThresholdPercent"`
	LowThresholdPercent  int `json:"lowThresholdPercent"`
	// MinimumAge spares images used or imported more recently.
	MinimumAge Duration `json:"minimumAge"`
}

// Hub is the connection to the fleet hub and what the hub may run here
// (the device's own manifests are trusted).
type Hub struct {
	// URL is mqtt://HOST:PORT or mqtts://HOST:PORT, or several of one
	// broker cluster separated by commas (as --hub takes them); "" (and
	// no URLs) runs without a hub.
	URL string `json:"url,omitempty"`
	// URLs is the list form of several brokers of one cluster: the
	// device connects to one and moves to another when it fails
	// (Brokers). Not with URL.
	URLs []string `json:"urls,omitempty"`
	// DeviceID defaults ("") to the node name.
	DeviceID string `json:"deviceId,omitempty"`
	// Key is the hub's public key (hub.pub from podhub init): desired
	// documents must carry its signature.
	Key string `json:"key,omitempty"`
	// AllowUnsigned accepts unsigned documents (a trusted broker only);
	// it cannot go with Key.
	AllowUnsigned bool `json:"allowUnsigned,omitempty"`
	// SealKey is the device's private sealing key (seal.key of its
	// enrolment bundle): the hub seals Secrets and ConfigMaps for it.
	// "": <dataDir>/seal.key, made at the first start.
	SealKey      string `json:"sealKey,omitempty"`
	Prefix       string `json:"prefix,omitempty"`
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	// Heartbeat is the period of node status reports.
	Heartbeat Duration          `json:"heartbeat"`
	Labels    map[string]string `json:"labels,omitempty"`
	TLS       HubTLS            `json:"tls"`
	Outbox    Outbox            `json:"outbox"`
	// PodSecurity is the Pod Security Standards level hub pods must meet
	// (privileged, baseline or restricted; "": baseline), of
	// PodSecurityVersion ("latest" or "v1.N"; "": latest).
	PodSecurity        string `json:"podSecurity,omitempty"`
	PodSecurityVersion string `json:"podSecurityVersion,omitempty"`
	// AllowProcessPods lets the hub run host commands; AllowRootProcessPods
	// lets those run as root.
	AllowProcessPods     bool      `json:"allowProcessPods,omitempty"`
	AllowRootProcessPods bool      `json:"allowRootProcessPods,omitempty"`
	Images               HubImages `json:"images"`
}

// Brokers are the hub's broker URLs: URL's (split at commas) then
// URLs'; none runs without a hub.
func (h Hub) Brokers() []string {
	var urls []string
	for _, u := range append(strings.Split(h.URL, ","), h.URLs...) {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// Metrics is the Prometheus listener (docs/metrics.md). It is off unless
// Listen is set: a device's metrics name its pods.
type Metrics struct {
	// Listen is where /metrics, /metrics/resource and /metrics/probes are
	// served: a TCP address HOST:PORT (the kubelet's read-only port is
	// 127.0.0.1:10255) or unix:PATH; "" (the default) serves none.
	Listen string `json:"listen,omitempty"`
	// BearerTokenFile holds the token every request must then carry
	// (Authorization: Bearer TOKEN). A TCP address that is not loopback
	// is refused without it.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
}

// Objects bound the ConfigMaps and Secrets the device keeps, per source:
// those its manifest files give its static pods, and those the hub sends
// for its pods (0 is the default).
type Objects struct {
	// MaxObjects is how many (default 256).
	MaxObjects int `json:"maxObjects"`
	// MaxBytes is their data, keys and values (default 16Mi).
	MaxBytes resource.Quantity `json:"maxBytes"`
}

// Update is how the device updates podvisor itself (docs/selfupdate.md).
type Update struct {
	// ReleaseKey is the public key release manifests must be signed
	// with; "" : the hub's key (hub.key).
	ReleaseKey string `json:"releaseKey,omitempty"`
	// CommitTimeout bounds how long a new version has to become ready,
	// adopt every pod and reach the hub before it is rolled back.
	CommitTimeout Duration `json:"commitTimeout"`
}

// HubTLS are the files of an mqtts:// connection.
type HubTLS struct {
	CA         string `json:"ca,omitempty"`
	Cert       string `json:"cert,omitempty"`
	Key        string `json:"key,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// Outbox bounds the statuses and events waiting for the hub (by default
// 10000 rows and 8 MiB; 0 is the default too).
type Outbox struct {
	MaxRows  int               `json:"maxRows,omitempty"`
	MaxBytes resource.Quantity `json:"maxBytes"`
}

// HubImages restrict where hub pods' images come from.
type HubImages struct {
	// Registries, when set, are the only registries or repository
	// prefixes hub pods' images may name.
	Registries []string `json:"registries,omitempty"`
	// RequireDigest: every image pinned name@sha256:….
	RequireDigest bool `json:"requireDigest,omitempty"`
	// Shared are the local images (side-loaded) hub pods may use; they
	// use only images pulled from a registry otherwise.
	Shared []string `json:"shared,omitempty"`
}

// Firmware is how the device's operating system is updated: through the
// update tool it already uses (firmware/, docs/firmware.md).
type Firmware struct {
	// Driver is FirmwareDriverRAUC, FirmwareDriverSWUpdate or "" (none: firmware
	// updates are refused).
	Driver string `json:"driver,omitempty"`
	// CommitDeadline is how long a freshly booted system has to become
	// healthy (pods adopted, hub reached) before it is marked bad.
	CommitDeadline Duration `json:"commitDeadline"`
	// StateDir keeps the drivers' install records; "" is
	// <dataDir>/firmware.
	StateDir string `json:"stateDir,omitempty"`
	// Reboot is how the device boots an installed bundle: "" (auto:
	// rebootCommand, else systemctl reboot under systemd, else reboot)
	// or "never" (the device's owner reboots it; the order waits in
	// Restarting until then).
	Reboot string `json:"reboot,omitempty"`
	// RebootCommand, when set, replaces the default reboot command.
	RebootCommand []string         `json:"rebootCommand,omitempty"`
	RAUC          FirmwareRAUC     `json:"rauc"`
	SWUpdate      FirmwareSWUpdate `json:"swupdate"`
}

// FirmwareRAUC reaches the RAUC service.
type FirmwareRAUC struct {
	// Bus is a D-Bus address (unix:path=…); "" is the system bus.
	Bus string `json:"bus,omitempty"`
}

// FirmwareSWUpdate reaches SWUpdate.
type FirmwareSWUpdate struct {
	// ControlSocket and ProgressSocket are SWUpdate's; "" finds them
	// (/tmp/sockinstctrl and /tmp/swupdateprog, or under /run/swupdate).
	ControlSocket  string `json:"controlSocket,omitempty"`
	ProgressSocket string `json:"progressSocket,omitempty"`
	// Select is the software set and mode to install (SET,MODE, as
	// swupdate -e); "" leaves SWUpdate's own selection.
	Select string `json:"select,omitempty"`
}

// The values of firmware.driver.
const (
	FirmwareDriverRAUC     = "rauc"
	FirmwareDriverSWUpdate = "swupdate"
)

// FirmwareStateDir is where the firmware drivers keep their install
// records: firmware.stateDir, else <dataDir>/firmware.
func (c *Config) FirmwareStateDir() string {
	if c.Firmware.StateDir != "" {
		return c.Firmware.StateDir
	}
	return filepath.Join(c.DataDir, "firmware")
}

// Default is the config of a device without a config file.
func Default() *Config {
	lc := lifecycle.DefaultConfig()
	return &Config{
		Manifests:      DefaultManifests,
		DataDir:        DefaultDataDir,
		Socket:         DefaultSocket,
		ManifestResync: Duration{Duration: time.Minute},
		Backoff: Backoff{Initial: Duration{Duration: lc.BackoffInitial}, Max: Duration{Duration: lc.BackoffMax},
			Reset: Duration{Duration: lc.BackoffReset}},
		Logs:      Logs{MaxSize: resource.MustParse("10Mi"), MaxFiles: 5},
		GC:        GC{MaxDeadPerContainer: 1, MaxDeadContainers: 100},
		Cgroups:   Cgroups{Root: "podvisor", Mount: "/sys/fs/cgroup", Driver: "cgroupfs"},
		ConfigDir: DefaultConfigDir,
		Node:      Node{MaxPods: DefaultMaxPods},
		Eviction: Eviction{PressureTransitionPeriod: Duration{Duration: 5 * time.Minute},
			MonitorPeriod: Duration{Duration: 10 * time.Second}},
		// The kubelet's shutdownGracePeriod 30s with
		// shutdownGracePeriodCriticalPods 10s.
		ShutdownGracePeriodByPodPriority: []ShutdownGracePeriod{{Priority: 0, ShutdownGracePeriodSeconds: 20},
			{Priority: 2000000000, ShutdownGracePeriodSeconds: 10}},
		Containerd: defaultContainerd(),
		Hub: Hub{Prefix: DefaultHubPrefix, Heartbeat: Duration{Duration: 30 * time.Second},
			Outbox:      Outbox{MaxRows: 10000, MaxBytes: resource.MustParse("8Mi")},
			PodSecurity: "baseline", PodSecurityVersion: "latest"},
		Update:         Update{CommitTimeout: Duration{Duration: 5 * time.Minute}},
		Objects:        Objects{MaxObjects: 256, MaxBytes: resource.MustParse("16Mi")},
		Probes:         Probes{EBPF: true},
		Process:        Process{Keeper: true},
		Firmware:       Firmware{CommitDeadline: Duration{Duration: 5 * time.Minute}},
		ManifestSettle: 5 * time.Millisecond,
		SaveDelay:      100 * time.Millisecond,
	}
}

func defaultContainerd() Containerd {
	return Containerd{Runtime: "io.containerd.runc.v2", SandboxDir: "/run/podvisor/sandbox", ShimGroup: ShimGroupDevice,
		CNIConfDir: "/etc/cni/net.d", CNIBinDirs: "/usr/lib/cni:/opt/cni/bin",
		ImageGC: ImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: Duration{Duration: 2 * time.Minute}}}
}

// ContainerdNamed reports whether the config asks for containerd pods: its
// file sets anything in the containerd section, or a setting differs from
// its default. Without that, containerd pods run only where containerd's
// default socket exists.
func (c *Config) ContainerdNamed() bool {
	return c.containerdNamed || !reflect.DeepEqual(c.Containerd, defaultContainerd())
}

// ContainerdAddress is containerd's socket: the configured one, else
// podvisor's own containerd's when managed, else containerd's default.
func (c *Config) ContainerdAddress() string {
	switch {
	case c.Containerd.Address != "":
		return c.Containerd.Address
	case c.Containerd.Managed:
		return DefaultManagedSocket
	}
	return DefaultContainerdSocket
}

// ManagedRoot is where a containerd podvisor runs itself keeps images and
// snapshots: the configured root, else <dataDir>/containerd/root.
func (c *Config) ManagedRoot() string {
	if c.Containerd.Root != "" {
		return c.Containerd.Root
	}
	return filepath.Join(c.DataDir, "containerd", "root")
}
