// Package pluginapi is the protocol between the daemon and its containerd
// runtime plugin, podvisor-containerd: the requests and replies of its
// net/rpc service (JSON over the plugin's stdin and stdout), the labels
// on the containers it creates and the kubelet's waiting reasons it
// answers with. It imports nothing of podvisor, so the plugin links
// neither the daemon nor Kubernetes' API types.
package pluginapi

import (
	"fmt"
	"log/slog"
	"time"
)

// Service is the RPC service name the plugin registers.
const Service = "Runtime"

// Namespace is the containerd namespace podvisor's containers live in.
const Namespace = "podvisor"

// AnnotationShimGroup is the OCI annotation by which containerd's runc
// shim (v2) puts containers with the same value into one shim process.
const AnnotationShimGroup = "io.containerd.runc.v2.group"

// Labels every container podvisor creates carries: the Kubernetes ones
// that tools like nerdctl and crictl show, and podvisor's instance.
const (
	LabelPodName      = "io.kubernetes.pod.name"
	LabelPodNamespace = "io.kubernetes.pod.namespace"
	LabelPodUID       = "io.kubernetes.pod.uid"
	LabelContainer    = "io.kubernetes.container.name"
	LabelInstance     = "io.podvisor.instance"
	LabelAttempt      = "io.podvisor.attempt"
	// LabelStopSignal is the image's STOPSIGNAL, set by the plugin.
	LabelStopSignal = "io.podvisor.stop-signal"
	// LabelImageRef is the container's imageID as the CRI reports it,
	// set by the plugin.
	LabelImageRef = "io.podvisor.image-ref"
	// LabelEnvFile is the host path of the environment file of a
	// container whose environment holds a Secret's data (EnvFile), set by
	// the plugin: an exec into it reads its environment there.
	LabelEnvFile = "io.podvisor.env-file"
)

// Where a container with a Secret's data in its environment finds its
// environment file and the program that reads it (read-only binds).
const (
	EnvInitPath = "/.podvisor-exec-env"
	EnvFilePath = "/.podvisor-env"
)

// Waiting reasons of a container that could not be started, as the
// kubelet reports them.
const (
	ErrImagePull         = "ErrImagePull"
	ErrImageNeverPull    = "ErrImageNeverPull"
	InvalidImageName     = "InvalidImageName"
	CreateContainerError = "CreateContainerError"
	StartError           = "StartError"
)

// ContainerConfig is everything the plugin needs to create and start one
// container instance. The daemon resolves the pod: env values, volumes'
// host paths, namespaces, cgroup and limits.
type ContainerConfig struct {
	// ID is the containerd container ID; containerd refuses a second
	// container with the same ID, so an instance can never start twice.
	ID         string            `json:"id"`
	Labels     map[string]string `json:"labels"`
	Image      string            `json:"image"`
	PullPolicy string            `json:"pullPolicy"`
	// LocalImages, when set, limits which images already in containerd
	// the container may use (a hub pod's); nil lets it use any (the
	// device's own pods).
	LocalImages *LocalImages `json:"localImages,omitempty"`
	// Command replaces the image's entrypoint and Args its cmd, as in
	// Kubernetes; nil keeps the image's.
	Command    []string `json:"command,omitempty"`
	Args       []string `json:"args,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	Hostname   string   `json:"hostname,omitempty"`
	// Namespaces to join by path (the pod's sandbox); an empty path is a
	// namespace of the container's own, unless the host's is asked for.
	NetNS string `json:"netns,omitempty"`
	IPCNS string `json:"ipcns,omitempty"`
	UTSNS string `json:"utsns,omitempty"`
	PIDNS string `json:"pidns,omitempty"`
	// HostNetwork shares the host's network and UTS namespaces, HostIPC
	// its IPC namespace and HostPID its PID namespace.
	HostNetwork bool     `json:"hostNetwork,omitempty"`
	HostIPC     bool     `json:"hostIPC,omitempty"`
	HostPID     bool     `json:"hostPID,omitempty"`
	Mounts      []Mount  `json:"mounts,omitempty"`
	Security    Security `json:"security"`
	// CgroupsPath is the spec's: "/path", or with SystemdCgroup runc's
	// "slice:prefix:id".
	CgroupsPath   string    `json:"cgroupsPath,omitempty"`
	SystemdCgroup bool      `json:"systemdCgroup,omitempty"`
	Resources     Resources `json:"resources"`
	OOMScoreAdj   *int      `json:"oomScoreAdj,omitempty"`
	// ShimGroup names the containerd shim the container joins (the
	// io.containerd.runc.v2.group annotation): containers with the same
	// group share one containerd-shim-runc-v2 process.
	ShimGroup string `json:"shimGroup,omitempty"`
	// Log is where the container's output goes, in the CRI format.
	LogPath     string `json:"logPath"`
	LogMaxBytes int64  `json:"logMaxBytes"`
	LogMaxFiles int    `json:"logMaxFiles"`
	// SecretEnv names the variables of Env that hold a Secret's data.
	// They stay out of the spec, which containerd keeps in its database on
	// disk: the container's whole environment, in order, and its command
	// (which may hold a Secret's data, expanded) go to EnvFile (a host
	// file on a memory-backed file system, bound at EnvFilePath) and the
	// container starts with EnvInit (podvisor-shim --exec-env;
	// its binary, EnvInit[0], bound at EnvInitPath), which sets that
	// environment and execs the command in the same process.
	SecretEnv []string `json:"secretEnv,omitempty"`
	EnvFile   string   `json:"envFile,omitempty"`
	EnvInit   []string `json:"envInit,omitempty"`
}

// LocalImages is what a pod from outside the device may use of the
// images in containerd: those pulled from a registry (which it could pull
// itself), and the ones the device owner shares. A pull for it never
// replaces another image of the same name.
type LocalImages struct {
	// Shared are image references (normalised): a repository alone
	// stands for each of its tags, one with a digest for that content.
	Shared []string `json:"shared,omitempty"`
}

// Mount is a bind or tmpfs mount into the container.
type Mount struct {
	Source      string   `json:"source"`
	Destination string   `json:"destination"`
	Type        string   `json:"type"` // bind or tmpfs
	Options     []string `json:"options,omitempty"`
}

// Security is a container's effective security context.
type Security struct {
	Privileged             bool     `json:"privileged,omitempty"`
	RunAsUser              *int64   `json:"runAsUser,omitempty"`
	RunAsGroup             *int64   `json:"runAsGroup,omitempty"`
	RunAsNonRoot           bool     `json:"runAsNonRoot,omitempty"`
	SupplementalGroups     []int64  `json:"supplementalGroups,omitempty"`
	CapAdd                 []string `json:"capAdd,omitempty"`
	CapDrop                []string `json:"capDrop,omitempty"`
	ReadOnlyRootFilesystem bool     `json:"readOnlyRootFilesystem,omitempty"`
	// NoNewPrivileges is allowPrivilegeEscalation: false.
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// Seccomp is the profile type: "" (the runtime's default, as
	// RuntimeDefault), "RuntimeDefault", "Unconfined" or "Localhost".
	Seccomp string `json:"seccomp,omitempty"`
	// SeccompProfile is a Localhost profile's file on the device.
	SeccompProfile string            `json:"seccompProfile,omitempty"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
}

// Resources are the container cgroup's limits (0: unset).
type Resources struct {
	CPUShares   uint64 `json:"cpuShares,omitempty"`
	CPUQuota    int64  `json:"cpuQuota,omitempty"`
	CPUPeriod   uint64 `json:"cpuPeriod,omitempty"`
	MemoryLimit int64  `json:"memoryLimit,omitempty"`
}

// RunArgs asks the plugin to pull if needed, create and start a container.
type RunArgs struct {
	Config ContainerConfig `json:"config"`
	// Pull is what a pull of the container's image authenticates with,
	// for that pull only: the plugin never stores or logs it.
	Pull PullAuth `json:"pull,omitzero"`
}

// LogValue logs a request without its logins: a JSON log handler would
// otherwise marshal them as the wire does.
func (a RunArgs) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", a.Config.ID), slog.String("image", a.Config.Image), slog.Any("pull", a.Pull))
}

// LogValue logs how many logins there are, never one of them.
func (a PullAuth) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("logins", len(a.Credentials)), slog.String("error", a.Error))
}

// PullAuth is the logins of a pod's imagePullSecrets that match its
// image, in the kubelet's order (pod/keyring).
type PullAuth struct {
	// Credentials are tried in order until a pull succeeds; none is an
	// anonymous pull (with the device's registry auth file, if any).
	Credentials []Credential `json:"credentials,omitempty"`
	// Error says the pod's pull secrets could not be read: a pull fails
	// with it (ErrImagePull), as the kubelet's does.
	Error string `json:"error,omitempty"`
}

// Credential is one registry login. It prints as [redacted] however it is
// formatted or logged.
type Credential struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func (Credential) String() string             { return "[redacted]" }
func (Credential) GoString() string           { return "[redacted]" }
func (Credential) LogValue() slog.Value       { return slog.StringValue("[redacted]") }
func (Credential) Format(f fmt.State, _ rune) { f.Write([]byte("[redacted]")) }

// RunReply says how a start went. A failure is a reply, not an RPC error,
// so its reason survives the trip.
type RunReply struct {
	StartedAt time.Time `json:"startedAt,omitzero"`
	Pid       int       `json:"pid,omitempty"`
	// StopSignal is the image's STOPSIGNAL, if it sets one.
	StopSignal string `json:"stopSignal,omitempty"`
	// ImageRef is the container's imageID as the CRI reports it: the
	// image's repo digest (docker.io/library/busybox@sha256:…), else its
	// config digest (sha256:…).
	ImageRef string   `json:"imageRef,omitempty"`
	Failure  *Failure `json:"failure,omitempty"`
}

// Failure is why a container did not start.
type Failure struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// IDArgs names a container.
type IDArgs struct {
	ID string `json:"id"`
}

// SignalArgs sends a signal to a container's main process, or with All
// to every process of it.
type SignalArgs struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
	All    bool   `json:"all,omitempty"`
}

// ExecArgs runs a command in a running container, for probes and hooks.
type ExecArgs struct {
	ID      string        `json:"id"`
	Command []string      `json:"command"`
	Timeout time.Duration `json:"timeout"`
}

// ExecReply is how the command ended and what it printed (bounded).
type ExecReply struct {
	ExitCode int    `json:"exitCode"`
	Output   string `json:"output"`
	TimedOut bool   `json:"timedOut,omitempty"`
}

// Found is a container the plugin found in containerd's podvisor
// namespace.
type Found struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels"`
	Running bool              `json:"running"`
	// StartedAt is when its task started, if it did.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Exit is how it ended, if its task has ended; nil with Running
	// false means it never ran or containerd lost its task.
	Exit *ExitStatus `json:"exit,omitempty"`
}

// ListReply lists podvisor's containers.
type ListReply struct {
	Containers []Found `json:"containers"`
}

// VersionReply describes the containerd the plugin talks to.
type VersionReply struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
}

// Image is one image in podvisor's namespace.
type Image struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt"`
	// InUse: a container (of any state) uses it.
	InUse bool `json:"inUse"`
	// Origin is where its content came from: "pull" (a registry),
	// "import" (side-loaded) or "" (unknown: stored by something else).
	// Hub pods use only pulled images and the shared ones.
	Origin string `json:"origin,omitempty"`
}

// ImagesReply lists images.
type ImagesReply struct {
	Images []Image `json:"images"`
}

// ImportArgs imports an OCI or docker-archive tarball on the device.
type ImportArgs struct {
	Path string `json:"path"`
}

// ImportReply names the images imported.
type ImportReply struct {
	Names []string `json:"names"`
}

// NameArgs names an image.
type NameArgs struct {
	Name string `json:"name"`
}

// GroupArgs names a shim group: a pod's UID with containerd.shimGroup pod.
type GroupArgs struct {
	Group string `json:"group"`
}

// NetworkArgs attaches a pod's network namespace to the CNI network, or
// detaches it.
type NetworkArgs struct {
	PodUID    string        `json:"podUID"`
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	NetNS     string        `json:"netns"`
	Ports     []PortMapping `json:"ports,omitempty"`
}

// PortMapping is a container port published on the host (hostPort).
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// NetworkReply is the pod's addresses.
type NetworkReply struct {
	IPs []string `json:"ips"`
}

// PruneArgs asks for unused images to be removed.
type PruneArgs struct {
	Bytes int64 `json:"bytes"`
	All   bool  `json:"all,omitempty"`
	// MinAge spares images used or imported more recently (the kubelet's
	// imageMinimumGCAge): one just pulled is about to be used.
	MinAge time.Duration `json:"minAge,omitempty"`
}

// PruneReply names the images removed and their content's size.
type PruneReply struct {
	Removed []string `json:"removed"`
	Freed   int64    `json:"freed"`
}

// Empty is an empty argument or reply.
type Empty struct{}

// ExitStatus is how a container ended, as the plugin reports it and
// records it on the container (the JSON of the process shim's exit
// record).
type ExitStatus struct {
	ExitCode   int32     `json:"exitCode"`
	Signal     int32     `json:"signal,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Unlocated is how a container ends that containerd lost, as the kubelet
// reports it (runtime.Unlocated).
func Unlocated(at time.Time) ExitStatus {
	return ExitStatus{ExitCode: 137, Reason: "ContainerStatusUnknown",
		Message: "The container could not be located when the pod was terminated", FinishedAt: at}
}
