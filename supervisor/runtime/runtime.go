// Package runtime is the contract between the daemon and what runs its
// containers: the process runtime (host processes under podvisor's shim)
// and containerd (through the podvisor-containerd plugin). A runtime is
// chosen per pod by its runtimeClassName (Registry); the daemon asks it,
// never checks which one it is. Capabilities only some runtimes have are
// narrow interfaces beside Runtime. The concrete runtimes register
// themselves (RegisterPlugin) and the command chooses which to run: only
// their own packages and the commands import them.
//
// It also resolves what Kubernetes defines for a container whatever runs
// it: its process (Resolve), downward API values and subPathExpr.
package runtime

import (
	"errors"
	"os"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/vocab"
)

// Exit is how a container instance ended: the one termination record the
// runtimes report and the core keeps.
type Exit = vocab.Termination

// Unlocated is how a container ends whose runtime lost it (its shim was
// killed before recording, containerd forgot its task, a reboot wiped the
// run state), as the kubelet reports it.
func Unlocated(instanceID string, at time.Time) Exit {
	return Exit{InstanceID: instanceID, ExitCode: 137, Reason: "ContainerStatusUnknown",
		Message: "The container could not be located when the pod was terminated", FinishedAt: at}
}

// Runtime runs container instances. Start is called on the daemon's loop
// and must not block; the other methods may be called from any goroutine.
type Runtime interface {
	// Start starts an instance. It prepares what must be prepared in
	// order on the caller's goroutine and reports the outcome through
	// done, once, from any goroutine.
	Start(c *Container, done func(Started))
	// Signal sends sig to an instance's main process; 0 is the
	// container's own stop signal (its image's, else SIGTERM).
	Signal(instanceID string, sig syscall.Signal) error
	// Kill SIGKILLs every process of an instance.
	Kill(instanceID string) error
	// Remove deletes what is left of a finished instance.
	Remove(instanceID string) error
	// Recover lists the instances the runtime holds. Live ones it can
	// follow are followed: their exits arrive on Exits.
	Recover() ([]Found, error)
	// Exits delivers the end of every started or followed instance.
	Exits() <-chan Exit
	// TerminationFile is the host file holding an instance's termination
	// message ("" if it has none).
	TerminationFile(instanceID string) string
	// InstanceCgroup is the cgroup an instance runs in, below its pod's.
	InstanceCgroup(pod *v1.Pod, container, instanceID string) string
	// ExecTarget says how the CLI runs a command in a running instance.
	ExecTarget(pod *v1.Pod, container, instanceID string, node PodEnv) (ExecTarget, error)
	// ForgetPod removes what the runtime keeps of a pod that is gone.
	ForgetPod(uid types.UID)
}

// Container is an instance to start, as the daemon prepared it. The
// runtime resolves its process (Resolve) with Node.
type Container struct {
	Pod        *v1.Pod
	Spec       *v1.Container
	InstanceID string
	Attempt    int
	// Node is what the pod's containers see of the device, with the
	// ConfigMaps and Secrets the pod may see (Node.Objects, chosen per
	// pod: its environment's references, its volumes, and the logins of
	// its imagePullSecrets for a pull).
	Node PodEnv
	// LogPath is the instance's log file (rotated at LogMaxBytes,
	// LogMaxFiles kept).
	LogPath     string
	LogMaxBytes int64
	LogMaxFiles int
	OOMScoreAdj int
	// Cgroup makes the pod's cgroup and returns the instance's
	// (InstanceCgroup; "" without cgroups), which the runtime creates.
	Cgroup func() (string, error)
	// Mounts prepares the pod's volumes and files and returns this
	// container's mounts; env is its environment (for subPathExpr).
	// Runtimes that give a container its own root call it.
	Mounts func(env []string) ([]Mount, error)
	// VolumeMounts prepares the pod's volumes and returns this
	// container's volume mounts alone, none of the files a container of
	// its own root gets (/etc/hosts, /dev/shm, …): what a runtime whose
	// containers see the host's root (process) binds in a mount
	// namespace of the container's own.
	VolumeMounts func(env []string) ([]Mount, error)
	// LocalImages, when set, limits which images already on the device
	// the container may use (a pod from the hub); nil lets it use any
	// (the device's own pods). Runtimes without images ignore it.
	LocalImages *LocalImages
}

// LocalImages is what a pod from outside the device may use of the
// images on it: those pulled from a registry, which it could pull itself,
// and the ones the device owner shares. A pull for it never replaces
// another image of the same name.
type LocalImages struct {
	// Shared are the owner's image references (normalised): a
	// repository alone stands for each of its tags, one with a digest
	// for that content.
	Shared []string
}

// Mount is a bind of a host path into a container.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Started is the outcome of a Start.
type Started struct {
	At time.Time
	// Err: the instance did not start. A *CreateError means nothing was
	// created (the container waits with its reason, no restart counted);
	// any other error is a failed start (StartError, a restart counted).
	Err error
	// Leftover: the runtime may hold something of the failed instance,
	// to Remove once its end is saved.
	Leftover bool
	// Events are the kubelet's events about the pod that the start gave
	// (FailedToRetrieveImagePullSecret), to record before its outcome's.
	Events []Event
}

// Event is an event about a pod, as the kubelet records it.
type Event struct {
	Type, Reason, Message string
}

// CreateError is a container the runtime could not create, with the
// kubelet's waiting reason (CreateContainerConfigError, ErrImagePull, …).
type CreateError struct {
	Reason, Message string
}

func (e *CreateError) Error() string { return e.Reason + ": " + e.Message }

// Found is an instance a runtime holds.
type Found struct {
	InstanceID   string
	PodUID       types.UID
	PodNamespace string
	PodName      string
	Container    string
	Attempt      int
	// Alive: it runs; StartedAt when it started, if it did.
	Alive     bool
	StartedAt time.Time
	// Exit is how a finished one ended, as its runtime recorded it.
	Exit *Exit
	// Followed: this daemon already follows it (its exit will arrive).
	Followed bool
}

// ExecTarget tells the CLI how to run a command in a container; the local
// API sends it as it is (api.ExecTarget).
type ExecTarget struct {
	// Runtime names the runtime.
	Runtime string `json:"runtime"`
	// containerd: the plugin to run ("… exec") and where containerd is.
	Plugin      string `json:"plugin,omitempty"`
	Address     string `json:"address,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	// process: the container's environment, directory, user and the
	// cgroup.procs files to join.
	Env         []string `json:"env,omitempty"`
	Dir         string   `json:"dir,omitempty"`
	UID         *uint32  `json:"uid,omitempty"`
	GID         *uint32  `json:"gid,omitempty"`
	CgroupProcs []string `json:"cgroupProcs,omitempty"`
	// MountNSPid and MountNSStart (its start time, in clock ticks since
	// boot) name the process whose mount namespace the command joins: a
	// process container with volumes has one of its own. 0: the host's.
	MountNSPid   int    `json:"mountNSPid,omitempty"`
	MountNSStart uint64 `json:"mountNSStart,omitempty"`
}

// Cgroups is where the daemon puts pods, as runtimes need to know it.
type Cgroups struct {
	// Driver is nil without cgroups.
	Driver cgroups.Driver
	Layout cgroups.Layout
	// Mount is the hierarchy's mount point; Shims the cgroup shims and
	// plugins live in.
	Mount string
	Shims string
	// Unified is a hybrid host's cgroup2 mount, where process containers
	// are also placed (in a mirror of their v1 cgroup's path) so that the
	// sockets they create carry a cgroup the listen watcher watches;
	// "" places nothing there.
	Unified string
}

// PodCgroup is a pod's cgroup.
func (c Cgroups) PodCgroup(p *v1.Pod) string {
	return c.Layout.Pod(vocab.QOSClass(p), p.UID)
}

// Reconnecting is a runtime that talks to a daemon which may be away: it
// signals each (re)connection, after which what it holds is reconciled
// with the records (Recover, Follow).
type Reconnecting interface {
	Connected() <-chan struct{}
	// Follow waits for a found instance's exit, which arrives on Exits.
	Follow(instanceID string)
	// Follows reports whether the daemon waits for an instance's exit
	// (or for its start).
	Follows(instanceID string) bool
}

// History is a runtime that keeps finished instances (their directories,
// exit records and termination messages) until Remove.
type History interface {
	// Kept lists those whose instance ID starts with prefix ("": all),
	// with when each finished (zero: it has not).
	Kept(prefix string) []Kept
}

// Kept is an instance a History runtime keeps.
type Kept struct {
	InstanceID string
	Finished   time.Time
}

// ErrExecTimedOut is an InContainer command that outlived its timeout.
var ErrExecTimedOut = errors.New("timed out")

// InContainer is a runtime whose containers have their own root and
// network: probes and hooks run their commands inside, and connect from
// inside the pod's network.
type InContainer interface {
	// Exec runs a command in the container. err is ErrExecTimedOut when
	// the command outlived its timeout; any other error says the runtime
	// could not run it (the runtime unreachable, the container stopping,
	// the command not started).
	Exec(instanceID string, command []string, timeout time.Duration) (exitCode int, output string, err error)
	// NetNS is the pod's network namespace ("" for the host's).
	NetNS(pod *v1.Pod) string
}

// StartedProcesses is a runtime whose containers run on the host (probes
// and hooks run their commands there, as the container runs): it keeps
// the process each instance started with, whose environment is the one
// its commands get, as a container's own is — its ConfigMaps and Secrets
// as they were then, known even before a restarted daemon has its
// objects again.
type StartedProcesses interface {
	StartedProcess(instanceID string) (Process, error)
}

// MountNamespaces is a runtime whose containers may see the host's root
// in a mount namespace of their own (process containers with volumes):
// probes and hooks run their commands there.
type MountNamespaces interface {
	// MountNS opens a running instance's mount namespace; nil, nil: it
	// has none of its own.
	MountNS(instanceID string) (*os.File, error)
}

// HostAdmitter is a runtime that may refuse a pod for what the host is
// now (a process pod's mountPath missing): the pod waits Pending with the
// reason, and is asked about again now and then.
type HostAdmitter interface {
	// AdmitPod says why the pod cannot start on this host now; "" when
	// it can.
	AdmitPod(pod *v1.Pod) (reason, message string)
}

// PodNetworks is a runtime that gives pods their own addresses.
type PodNetworks interface {
	PodIPs(pod *v1.Pod) []string
}

// StatusDecorator is a runtime that adds to container statuses what only
// it knows (image IDs, its own container IDs).
type StatusDecorator interface {
	DecorateStatuses(statuses []v1.ContainerStatus)
}

// PodIPPlaceholder stands for the pod's address in its hosts file until
// the runtime that gives it one has attached it to the network.
const PodIPPlaceholder = "127.0.1.1"
