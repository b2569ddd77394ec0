// Package retention keeps finished container instances and their logs
// within the device's bounds (see rules.go), and lays out where each
// container instance logs.
package retention

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Options are the data directory and the retention bounds.
type Options struct {
	// DataDir holds logs/, one directory per pod.
	DataDir string
	// MaxDeadPerContainer is how many finished instances (directories
	// and logs) each container keeps besides the current one.
	MaxDeadPerContainer int
	// MaxDeadContainers bounds finished instances on the whole device
	// (0: no bound beyond the per-container one).
	MaxDeadContainers int
	Log               *slog.Logger
}

// Runtimes are the runtimes that may keep finished instances (a
// *runtime.Registry); only those that are a runtime.History are asked.
type Runtimes interface {
	All() []runtime.Runtime
}

// Pods finds the pod an instance ID's UID names (a *lifecycle.Machine).
type Pods interface {
	Instance(types.UID) *lifecycle.Instance
}

// Keeper removes the finished instances and logs the bounds no longer
// keep. It is used from the daemon's loop only.
type Keeper struct {
	opts Options
}

// New returns a keeper for a data directory and its bounds.
func New(o Options) *Keeper { return &Keeper{opts: o} }

// LogPath is where a container instance logs, as the kubelet lays out
// /var/log/pods: one directory per pod, one per container, one file per
// attempt.
func (k *Keeper) LogPath(pod *v1.Pod, container string, attempt int) string {
	return filepath.Join(k.PodLogDir(pod), container, strconv.Itoa(attempt)+".log")
}

// PodLogDir is the directory of a pod's logs.
func (k *Keeper) PodLogDir(pod *v1.Pod) string {
	return filepath.Join(k.opts.DataDir, "logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// TrimContainer keeps the instance directories and logs of the attempt
// about to start and of the MaxDeadPerContainer attempts before it.
func (k *Keeper) TrimContainer(rts Runtimes, pod *v1.Pod, container string, attempt int) {
	keepFrom := attempt - k.opts.MaxDeadPerContainer
	kept, owner := keptBy(rts, fmt.Sprintf("%s_%s_", pod.UID, container))
	for _, id := range staleInstances(kept, keepFrom) {
		if err := owner[id].Remove(id); err != nil {
			k.opts.Log.Warn("removing old instance", "instance", id, "err", err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(k.PodLogDir(pod), container, "*.log*"))
	for _, l := range staleLogs(logs, keepFrom) {
		os.Remove(l)
	}
}

// TrimDevice keeps at most MaxDeadContainers finished instances on the
// device (deviceGCCandidates), removing the log of each instance removed
// whose pod is still known.
func (k *Keeper) TrimDevice(rts Runtimes, pods Pods) {
	if k.opts.MaxDeadContainers <= 0 {
		return
	}
	kept, owner := keptBy(rts, "")
	candidates, excess := deviceGCCandidates(kept, k.opts.MaxDeadContainers)
	for _, x := range candidates {
		if excess <= 0 {
			break
		}
		if err := owner[x.InstanceID].Remove(x.InstanceID); err == nil {
			excess--
			uid, name, n, _ := vocab.ParseInstanceID(x.InstanceID)
			if in := pods.Instance(uid); in != nil {
				os.Remove(k.LogPath(in.Pod, name, n))
			}
		}
	}
}

// RemovePodLogs removes the logs of a pod that is gone, whatever its name
// was.
func (k *Keeper) RemovePodLogs(uid types.UID) {
	logDirs, _ := filepath.Glob(filepath.Join(k.opts.DataDir, "logs", "*_"+string(uid)))
	for _, dir := range logDirs {
		os.RemoveAll(dir)
	}
}

// keptBy lists the instances the runtimes keep whose IDs start with
// prefix, with the runtime that keeps each.
func keptBy(rts Runtimes, prefix string) ([]runtime.Kept, map[string]runtime.Runtime) {
	var all []runtime.Kept
	owner := map[string]runtime.Runtime{}
	for _, rt := range rts.All() {
		if h, ok := rt.(runtime.History); ok {
			for _, k := range h.Kept(prefix) {
				all = append(all, k)
				owner[k.InstanceID] = rt
			}
		}
	}
	return all, owner
}
