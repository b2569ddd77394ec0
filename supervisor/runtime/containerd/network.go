package containerd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// podNetwork is a pod's attachment to the CNI network: made once, by the
// first of its containers to start, and shared by the others.
type podNetwork struct {
	args pluginapi.NetworkArgs
	once sync.Once
	ips  []string
	err  error
}

// networkFile records a pod's addresses and port mappings, so a restarted
// daemon shows them and can detach the pod when it goes.
const networkFile = "network.json"

type networkRecord struct {
	IPs   []string                `json:"ips"`
	NetNS string                  `json:"netns"`
	Ports []pluginapi.PortMapping `json:"ports,omitempty"`
}

// podDir is where a pod's files are (the daemon's pod directory).
func (r *Runtime) podDir(uid types.UID) string {
	return filepath.Join(r.dataDir, "pods", string(uid))
}

// podNetworkFor returns the pod's network attachment, to be made by the
// caller's goroutine (ensure), or nil when the pod needs none: it uses
// the host's network, or is attached already. r.mu is held.
func (r *Runtime) podNetworkFor(pod *v1.Pod, netns string) *podNetwork {
	if pod.Spec.HostNetwork || len(r.podIPsLocked(pod)) > 0 {
		return nil
	}
	if nw := r.podNets[pod.UID]; nw != nil {
		return nw
	}
	args := pluginapi.NetworkArgs{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, NetNS: netns}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.HostPort > 0 {
					args.Ports = append(args.Ports, pluginapi.PortMapping{HostPort: p.HostPort,
						ContainerPort: p.ContainerPort, Protocol: string(p.Protocol), HostIP: p.HostIP})
				}
			}
		}
	}
	nw := &podNetwork{args: args}
	r.podNets[pod.UID] = nw
	return nw
}

// ensure attaches the pod once (off the loop: CNI takes tens of
// milliseconds), detaching first what a previous boot left recorded.
func (r *Runtime) ensure(nw *podNetwork) {
	nw.once.Do(func() {
		file := filepath.Join(r.podDir(types.UID(nw.args.PodUID)), networkFile)
		var old networkRecord
		if data, err := os.ReadFile(file); err == nil && json.Unmarshal(data, &old) == nil {
			r.client.TeardownNetwork(pluginapi.NetworkArgs{PodUID: nw.args.PodUID, Namespace: nw.args.Namespace,
				Name: nw.args.Name, NetNS: old.NetNS, Ports: old.Ports})
		}
		nw.ips, nw.err = r.client.SetupNetwork(nw.args)
		if nw.err != nil {
			return
		}
		// The pod's hostname resolves to its address, as the kubelet
		// writes /etc/hosts (the file is bound into every container).
		hosts := filepath.Join(filepath.Dir(file), "hosts")
		if data, err := os.ReadFile(hosts); err == nil {
			os.WriteFile(hosts, []byte(strings.Replace(string(data), runtime.PodIPPlaceholder+"\t", nw.ips[0]+"\t", 1)), 0o644)
		}
		data, _ := json.Marshal(networkRecord{IPs: nw.ips, NetNS: nw.args.NetNS, Ports: nw.args.Ports})
		os.MkdirAll(filepath.Dir(file), 0o755)
		if err := os.WriteFile(file, data, 0o644); err != nil {
			r.log.Warn("recording the pod's network", "pod", nw.args.Name, "err", err)
		}
	})
}

// networkDone keeps what a start learnt of its pod's network.
func (r *Runtime) networkDone(uid types.UID, nw *podNetwork) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.podNets[uid] != nw {
		return
	}
	if nw.err != nil {
		delete(r.podNets, uid) // the next start tries again
		return
	}
	r.podIPs[uid] = nw.ips
}

// PodIPs are the pod's addresses (none on the host's network).
func (r *Runtime) PodIPs(pod *v1.Pod) []string {
	if pod.Spec.HostNetwork {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.podIPsLocked(pod)
}

// podIPsLocked are the pod's addresses, read back from its record the
// first time for a pod whose namespaces survived the daemon's restart
// (not a reboot: that empties the sandboxes). r.mu is held.
func (r *Runtime) podIPsLocked(pod *v1.Pod) []string {
	if ips, ok := r.podIPs[pod.UID]; ok || pod.Spec.HostNetwork {
		return ips
	}
	sb := sandbox.Sandbox{Dir: filepath.Join(r.cfg.SandboxDir, string(pod.UID))}
	var rec networkRecord
	data, err := os.ReadFile(filepath.Join(r.podDir(pod.UID), networkFile))
	if err == nil && json.Unmarshal(data, &rec) == nil && sb.Exists(sandbox.Net) {
		r.podIPs[pod.UID] = rec.IPs
		return rec.IPs
	}
	if _, attaching := r.podNets[pod.UID]; !attaching {
		r.podIPs[pod.UID] = nil // looked: nothing recorded
	}
	return nil
}

// withPodIP fills the downward API's status.podIP into an environment
// built before the pod had an address.
func withPodIP(env []string, c *v1.Container, ips []string) []string {
	if len(ips) == 0 {
		return env
	}
	names := map[string]string{}
	for _, e := range c.Env {
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			switch f.FieldRef.FieldPath {
			case "status.podIP":
				names[e.Name] = ips[0]
			case "status.podIPs":
				names[e.Name] = strings.Join(ips, ",")
			}
		}
	}
	out := append([]string{}, env...)
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := names[k]; ok {
			out[i] = k + "=" + v
		}
	}
	return out
}
