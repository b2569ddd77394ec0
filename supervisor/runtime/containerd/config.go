package containerd

import (
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Config is how pods without runtimeClassName process run.
type Config struct {
	// Address is containerd's socket; "" disables containerd pods.
	Address string
	// Plugin is the podvisor-containerd command (its arguments are added).
	Plugin      []string
	Snapshotter string
	Runtime     string
	AuthFile    string
	// CertsDir holds registries' CAs ("": the plugin's default,
	// /etc/containerd/certs.d).
	CertsDir string
	RuncRoot string
	// NoPivotRoot has runc chroot into containers' roots, where the
	// device's root is an initramfs (pivot_root cannot leave it).
	NoPivotRoot bool
	// ShimGroup is which containers share one containerd shim: "pod", each
	// pod's; "container", none (a shim each); anything else ("device",
	// the default), every container of this daemon.
	ShimGroup string
	// SandboxDir holds the pods' namespaces (/run/podvisor/sandbox).
	SandboxDir string
	// PodInit is the command of the init that holds a pod's shared PID
	// namespace (podvisor-shim --pod-init).
	PodInit []string
	// EnvInit starts a container whose environment holds a Secret's data
	// (podvisor-shim --exec-env): its first element is the host's binary,
	// bound read-only into the container.
	EnvInit []string
	// CNIConfDir and CNIBinDirs locate the pod network (defaults:
	// /etc/cni/net.d, /usr/lib/cni:/opt/cni/bin).
	CNIConfDir string
	CNIBinDirs string
	// ImageFS is a path on the file system containerd keeps images on;
	// ImageGC its garbage collection thresholds.
	ImageFS string
	ImageGC ImageGC
	// Managed, when set, has podvisor run containerd itself.
	Managed *Managed
	// ConnectWait is how long the daemon waits for containerd at start
	// before it goes on and connects in the background.
	ConnectWait time.Duration
}

// ImageGC are the image garbage collection thresholds.
type ImageGC = runtime.ImageGC
