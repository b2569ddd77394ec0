package containerd

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// A pod that is gone is detached from the network and its namespaces
// removed off the daemon's loop: CNI's DEL alone took 100–400 ms (bench,
// busy 2 cores), and the loop waited for it with every other pod's exit
// and restart behind it. Its network record moves to detachDir first, so
// that a daemon killed meanwhile detaches the pod at its next start, and
// a start of the same pod (same UID: its manifest came back) waits until
// the old sandbox is gone.

// forgetWait bounds how long Close waits for pods being detached.
const forgetWait = 10 * time.Second

// detachDir holds the network records of the pods being detached.
func (r *Runtime) detachDir() string { return filepath.Join(r.dataDir, "network-detach") }

// ForgetPod removes what is kept of a pod that is gone: its termination
// message files at once; its network attachment, the container kept for
// its shim and its namespaces in the background.
func (r *Runtime) ForgetPod(uid types.UID) {
	rec, attached := r.takeNetworkRecord(uid)
	done := make(chan struct{})
	r.mu.Lock()
	delete(r.podIPs, uid)
	delete(r.podNets, uid)
	for id := range r.imageRefs {
		if strings.HasPrefix(id, string(uid)+"_") {
			delete(r.imageRefs, id)
		}
	}
	before := r.forgetting[uid]
	r.forgetting[uid] = done
	r.mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(r.dataDir, "termination", string(uid)+"_*"))
	for _, f := range files {
		r.removeTerminationFile(filepath.Base(f))
	}
	files, _ = filepath.Glob(r.envFile(string(uid) + "_*"))
	for _, f := range files {
		os.Remove(f)
	}
	go func() {
		if before != nil {
			<-before
		}
		r.clear(uid, rec, attached)
		r.forgotten(uid, done)
	}()
}

// clear detaches a forgotten pod from the network (if it was attached),
// deletes the container kept for its shim and removes its namespaces.
func (r *Runtime) clear(uid types.UID, rec networkRecord, attached bool) {
	if attached {
		r.detach(uid, rec)
	}
	if r.cfg.ShimGroup == shimPerPod {
		if err := r.client.ForgetShimGroup(string(uid)); err != nil {
			r.log.Warn("removing a pod's containers kept for its shim", "pod", uid, "err", err)
		}
	}
	if r.cfg.SandboxDir != "" {
		sb := sandbox.Sandbox{Dir: filepath.Join(r.cfg.SandboxDir, string(uid))}
		if _, err := os.Stat(sb.Dir); err == nil {
			if err := sb.Remove(); err != nil {
				r.log.Warn("removing a pod sandbox", "pod", uid, "err", err)
			}
		}
	}
}

// takeNetworkRecord moves a pod's network record from its pod directory
// (the daemon removes it next) to detachDir.
func (r *Runtime) takeNetworkRecord(uid types.UID) (networkRecord, bool) {
	var rec networkRecord
	data, err := os.ReadFile(filepath.Join(r.podDir(uid), networkFile))
	if err != nil || json.Unmarshal(data, &rec) != nil {
		return rec, false
	}
	err = os.MkdirAll(r.detachDir(), 0o700)
	if err == nil {
		err = os.WriteFile(filepath.Join(r.detachDir(), string(uid)+".json"), data, 0o600)
	}
	if err != nil {
		r.log.Warn("keeping a pod's network record until it is detached", "pod", uid, "err", err)
	}
	return rec, true
}

// detach detaches a pod from the network and, once done, drops its
// record; a record left (the plugin was away) is tried at the next start.
func (r *Runtime) detach(uid types.UID, rec networkRecord) {
	err := r.client.TeardownNetwork(pluginapi.NetworkArgs{PodUID: string(uid), NetNS: rec.NetNS, Ports: rec.Ports})
	if errors.Is(err, ErrNotRunning) {
		r.log.Warn("detaching a pod from the network: the plugin is away; trying at the next start", "pod", uid)
		return
	}
	if err != nil {
		r.log.Warn("detaching a pod from the network", "pod", uid, "err", err)
	}
	if err := os.Remove(filepath.Join(r.detachDir(), string(uid)+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("removing a detached pod's network record", "pod", uid, "err", err)
	}
}

// resumeDetaches finishes forgetting the pods a previous daemon was
// detaching when it stopped: their network, shim and namespaces.
func (r *Runtime) resumeDetaches() {
	files, _ := filepath.Glob(filepath.Join(r.detachDir(), "*.json"))
	for _, f := range files {
		uid := types.UID(strings.TrimSuffix(filepath.Base(f), ".json"))
		var rec networkRecord
		data, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(data, &rec) != nil {
			r.log.Warn("a pod's network record is unreadable; dropping it", "file", f, "err", err)
			os.Remove(f)
			continue
		}
		done := make(chan struct{})
		r.mu.Lock()
		r.forgetting[uid] = done
		r.mu.Unlock()
		go func() {
			r.clear(uid, rec, true)
			r.forgotten(uid, done)
		}()
	}
}

// forgotten ends a pod's forgetting.
func (r *Runtime) forgotten(uid types.UID, done chan struct{}) {
	r.mu.Lock()
	if r.forgetting[uid] == done {
		delete(r.forgetting, uid)
	}
	r.mu.Unlock()
	close(done)
}

// awaitForgotten waits until a pod that came back (its UID is forgotten
// still) has its old network and namespaces removed, so that they do not
// take the new ones with them. Rare: the same manifest removed and put
// back within a detach.
func (r *Runtime) awaitForgotten(uid types.UID) {
	r.mu.Lock()
	done := r.forgetting[uid]
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// waitForgotten waits for the pods being forgotten, at most d.
func (r *Runtime) waitForgotten(d time.Duration) {
	deadline := time.After(d)
	for {
		r.mu.Lock()
		var done chan struct{}
		for _, c := range r.forgetting {
			done = c
			break
		}
		r.mu.Unlock()
		if done == nil {
			return
		}
		select {
		case <-done:
		case <-deadline:
			r.log.Warn("pods still being detached from the network at exit; the next start finishes them")
			return
		}
	}
}
