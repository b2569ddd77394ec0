// Package shim is the supervisor process of process containers — the
// keeper that runs all of a data directory's (RunKeeper), or a shim per
// container (Run) — and the protocol the daemon speaks with them through
// instance directories and the keeper's socket. It imports only
// the standard library, x/sys and two small packages built on them alone
// (pidfd, pod/hostcmd), so the podvisor-shim binary that runs it stays
// small: it runs beside the daemon, and a shim's memory is paid per
// container.
package shim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/pod/hostcmd"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
)

// Files in an instance directory.
const (
	SpecFile  = "spec.json" // Spec, written by the daemon before the shim starts
	LockFile  = "lock"      // flock held by the shim for its whole life
	StateFile = "shim.json" // State, written once the leader runs
	ExitFile  = "exit.json" // ExitStatus, written by the shim as it ends
	LogFile   = "shim.log"  // the shim's own diagnostics
	// TerminationFile is the container's termination message, written by
	// the container through TerminationFD (Spec.TerminationLog).
	TerminationFile = "termination-log"
)

// File descriptors the daemon hands to a shim.
const (
	ReportFD = 3 // the shim writes one JSON StartReport line, then closes it
	LockFD   = 4 // the instance lock, held until the shim exits
)

// TerminationFD is the descriptor a container with Spec.TerminationLog
// gets its termination message file on; TerminationEnv names it in the
// container's environment as a path that works for any user.
const (
	TerminationFD   = 3
	TerminationEnv  = "TERMINATION_MESSAGE_PATH"
	TerminationPath = "/proc/self/fd/3"
)

// KillSignal asks a shim to SIGKILL its container's whole process tree. It
// is a real-time signal so every ordinary signal stays free to forward.
const KillSignal = syscall.Signal(40)

// DefaultPath is PATH for containers that do not set one.
const DefaultPath = hostcmd.DefaultPath

// MaxLine is the longest log line written whole; longer ones are split into
// partial (P) records, as CRI runtimes do.
const MaxLine = 16 << 10

// Spec is everything a shim needs to run one container instance.
type Spec struct {
	InstanceID   string   `json:"instanceID"`
	PodUID       string   `json:"podUID"`
	PodNamespace string   `json:"podNamespace"`
	PodName      string   `json:"podName"`
	Container    string   `json:"container"`
	Attempt      int      `json:"attempt"`
	Argv         []string `json:"argv"`
	Env          []string `json:"env"`
	Dir          string   `json:"dir,omitempty"`
	UID          *uint32  `json:"uid,omitempty"`
	GID          *uint32  `json:"gid,omitempty"`
	// Groups are the supplementary groups (supplementalGroups) when UID
	// or GID is set and the shim is root.
	Groups      []uint32 `json:"groups,omitempty"`
	LogPath     string   `json:"logPath"`
	LogMaxBytes int64    `json:"logMaxBytes"`
	LogMaxFiles int      `json:"logMaxFiles"`
	// Cgroup places the container before it runs; empty: no cgroup.
	Cgroup Cgroup `json:"cgroup,omitzero"`
	// OOMScoreAdj is the container's oom_score_adj, inherited at fork.
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
	// TerminationLog gives the container a termination message file
	// (TerminationFile, owned by its user) open on TerminationFD, and
	// TerminationEnv=TerminationPath unless its environment sets it.
	TerminationLog bool `json:"terminationLog,omitempty"`
	// Mounts are bound, in order, into a mount namespace made for the
	// container alone (a slave of the host's: nothing mounted there
	// reaches the host) before its command is looked up and run;
	// none: it runs in the shim's own.
	Mounts []Mount `json:"mounts,omitempty"`
	// PrivateFile, set, is where the container's Argv and whole Env are
	// (a PrivateSpec, on a memory-backed file system): its environment
	// holds a Secret's data, which never reaches persistent storage in
	// the clear. spec.json then has no argv (a shim or keeper that does
	// not know this field refuses to start a spec without a command,
	// rather than run one without its Secrets) and only the variables
	// that hold no Secret's data in env. ReadSpec reads both.
	PrivateFile string `json:"privateFile,omitempty"`
	// SecretEnv names the variables of Env that hold a Secret's data:
	// with PrivateFile set, WriteSpec keeps them out of spec.json.
	SecretEnv map[string]bool `json:"-"`
}

// PrivateSpec is the part of a Spec kept in its PrivateFile.
type PrivateSpec struct {
	InstanceID string   `json:"instanceID"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
}

// WriteSpec writes spec to dir's SpecFile and, if it has a PrivateFile,
// its command and environment there first, leaving in spec.json neither
// the command nor a variable of SecretEnv.
func WriteSpec(dir string, spec Spec) error {
	if spec.PrivateFile != "" {
		priv := PrivateSpec{InstanceID: spec.InstanceID, Argv: spec.Argv, Env: spec.Env}
		err := memoryBacked(filepath.Dir(spec.PrivateFile))
		if err == nil {
			err = WriteJSONAtomic(spec.PrivateFile, priv)
		}
		if err != nil {
			return fmt.Errorf("the container's private spec: %w", err)
		}
		public := make([]string, 0, len(spec.Env))
		for _, e := range spec.Env {
			name, _, _ := strings.Cut(e, "=")
			if !spec.SecretEnv[name] {
				public = append(public, e)
			}
		}
		spec.Argv, spec.Env = nil, public
	}
	return WriteJSONAtomic(filepath.Join(dir, SpecFile), spec)
}

// memoryBacked says why dir is not on a memory-backed file system (tmpfs,
// ramfs), checked as the private spec is written: a tmpfs unmounted
// since the daemon made sure of it must not let the spec reach the disk
// below. Tests replace it.
var memoryBacked = func(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	if t := uint32(st.Type); t != tmpfsMagic && t != ramfsMagic {
		return fmt.Errorf("%s is not on a memory-backed file system (type %#x)", dir, t)
	}
	return nil
}

// ReadSpec reads dir's SpecFile and, if it names a PrivateFile, the
// command and environment kept there: the spec the instance was started
// with. The private file must be this user's, a regular file only it may
// read or write, and name the same instance.
func ReadSpec(dir string) (Spec, error) {
	var spec Spec
	if err := ReadJSON(filepath.Join(dir, SpecFile), &spec); err != nil {
		return spec, err
	}
	return spec, ReadPrivate(&spec)
}

// ReadPrivate fills in the command and environment of a spec read from
// spec.json from its PrivateFile, if it names one.
func ReadPrivate(spec *Spec) error {
	if spec.PrivateFile == "" {
		return nil
	}
	priv, err := readPrivate(spec.PrivateFile)
	if err == nil && priv.InstanceID != spec.InstanceID {
		err = fmt.Errorf("it names instance %q", priv.InstanceID)
	}
	if err != nil {
		return fmt.Errorf("the container's private spec %s: %w", spec.PrivateFile, err)
	}
	spec.Argv, spec.Env = priv.Argv, priv.Env
	return nil
}

// maxPrivateSpec bounds a private spec: an exec's arguments and
// environment together cannot pass 2 MiB on Linux's default 8 MiB stack.
const maxPrivateSpec = 8 << 20

func readPrivate(path string) (PrivateSpec, error) {
	var priv PrivateSpec
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return priv, err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return priv, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return priv, fmt.Errorf("not a file of uid %d with mode 0600 (mode %#o, uid %d)", os.Geteuid(), st.Mode&0o7777, st.Uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPrivateSpec+1))
	if err != nil {
		return priv, err
	}
	if len(data) > maxPrivateSpec {
		return priv, fmt.Errorf("larger than %d bytes", maxPrivateSpec)
	}
	if err := json.Unmarshal(data, &priv); err != nil {
		return priv, err
	}
	return priv, nil
}

// Mount binds a host path (a volume prepared by the daemon) at a path
// that exists on the host, in the container's mount namespace only.
type Mount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"readOnly,omitempty"`
}

// Cgroup tells a shim where its container belongs.
type Cgroup struct {
	// Dir is the cgroup v2 directory: the container is cloned into it
	// (clone3 CLONE_INTO_CGROUP), so not one page runs outside.
	Dir string `json:"dir,omitempty"`
	// Procs are cgroup v1 cgroup.procs files: the shim writes the
	// leader's pid there while it is stopped at its exec; where ptrace is
	// refused, it joins them, forks (the child inherits them), and goes
	// back to Return.
	Procs  []string `json:"procs,omitempty"`
	Return []string `json:"return,omitempty"`
	// Await: the daemon places the shim itself (into a systemd scope)
	// and says so with a byte on the shim's stdin; the shim forks then
	// (the child inherits the cgroup) and goes back to Return.
	Await bool `json:"await,omitempty"`
	// OOMEvents is the memory.events file of a cgroup made for this start
	// alone (a systemd scope), read the moment the leader dies: systemd
	// removes the scope with its last process, before the daemon could
	// look, so the shim says OOMKilled itself.
	OOMEvents string `json:"oomEvents,omitempty"`
}

// State is what a running shim tells about itself.
type State struct {
	ShimPid     int       `json:"shimPid"`
	ShimStart   uint64    `json:"shimStart"`
	LeaderPid   int       `json:"leaderPid"`
	LeaderStart uint64    `json:"leaderStart"`
	StartedAt   time.Time `json:"startedAt"`
	BootID      string    `json:"bootID"`
	// Keeper is the control socket of the keeper running the instance
	// (then ShimPid and ShimStart are the keeper's); empty: its own shim.
	Keeper string `json:"keeper,omitempty"`
}

// ExitStatus is how a container instance ended.
type ExitStatus struct {
	ExitCode   int32     `json:"exitCode"`
	Signal     int32     `json:"signal,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Unlocated is how a container ends whose runtime lost it (its shim was
// killed before recording, containerd forgot its task, a reboot wiped the
// run state), as the kubelet reports it.
func Unlocated(at time.Time) ExitStatus {
	return ExitStatus{ExitCode: 137, Reason: "ContainerStatusUnknown",
		Message: "The container could not be located when the pod was terminated", FinishedAt: at}
}

// StartReport tells the daemon whether the container started.
type StartReport struct {
	Pid       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// Credential is the credential to run as uid and gid (hostcmd.Credential).
func Credential(uid, gid *uint32) *syscall.Credential { return hostcmd.Credential(uid, gid) }

// ProcStartTime returns a process's start time in clock ticks since boot.
func ProcStartTime(pid int) (uint64, error) { return pidfd.StartTime(pid) }

// BootID identifies the current boot: pids from another boot mean nothing.
func BootID() string { return pidfd.BootID() }

// WriteJSONAtomic writes v to path through a temporary file and a rename,
// so readers never see half a file.
func WriteJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON reads a JSON file written by WriteJSONAtomic.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}
