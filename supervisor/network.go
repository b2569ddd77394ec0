package supervisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// podNetwork is a pod's attachment to the CNI network: made once, by the
// first of its containers to start, and shared by the others.
type podNetwork struct {
	args containerd.NetworkArgs
	once sync.Once
	ips  []string
	err  error
}

// networkFile records a pod's addresses and port mappings, so a restarted
// daemon shows them and can detach the pod when it goes.
const networkFile = "network.json"

type networkRecord struct {
	IPs   []string                 `json:"ips"`
	NetNS string                   `json:"netns"`
	Ports []containerd.PortMapping `json:"ports,omitempty"`
}

// podNetworkFor returns the pod's network attachment, to be made by the
// caller's goroutine (ensure), or nil when the pod needs none: it uses
// the host's network, or is attached already.
func (d *Daemon) podNetworkFor(pod *v1.Pod, netns string) *podNetwork {
	if pod.Spec.HostNetwork || len(d.podIPs[pod.UID]) > 0 {
		return nil
	}
	if nw := d.podNets[pod.UID]; nw != nil {
		return nw
	}
	args := containerd.NetworkArgs{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, NetNS: netns}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.HostPort > 0 {
					args.Ports = append(args.Ports, containerd.PortMapping{HostPort: p.HostPort,
						ContainerPort: p.ContainerPort, Protocol: string(p.Protocol), HostIP: p.HostIP})
				}
			}
		}
	}
	nw := &podNetwork{args: args}
	d.podNets[pod.UID] = nw
	return nw
}

// ensure attaches the pod once (off the loop: CNI takes tens of
// milliseconds), detaching first what a previous boot left recorded.
func (d *Daemon) ensure(nw *podNetwork) {
	nw.once.Do(func() {
		file := filepath.Join(d.podDir(types.UID(nw.args.PodUID)), networkFile)
		var old networkRecord
		if data, err := os.ReadFile(file); err == nil && json.Unmarshal(data, &old) == nil {
			d.ctrd.TeardownNetwork(containerd.NetworkArgs{PodUID: nw.args.PodUID, Namespace: nw.args.Namespace,
				Name: nw.args.Name, NetNS: old.NetNS, Ports: old.Ports})
		}
		nw.ips, nw.err = d.ctrd.SetupNetwork(nw.args)
		if nw.err != nil {
			return
		}
		// The pod's hostname resolves to its address, as the kubelet
		// writes /etc/hosts (the file is bound into every container).
		hosts := filepath.Join(filepath.Dir(file), "hosts")
		if data, err := os.ReadFile(hosts); err == nil {
			os.WriteFile(hosts, []byte(strings.Replace(string(data), podIPPlaceholder+"\t", nw.ips[0]+"\t", 1)), 0o644)
		}
		data, _ := json.Marshal(networkRecord{IPs: nw.ips, NetNS: nw.args.NetNS, Ports: nw.args.Ports})
		os.MkdirAll(filepath.Dir(file), 0o755)
		if err := os.WriteFile(file, data, 0o644); err != nil {
			d.log.Warn("recording the pod's network", "pod", nw.args.Name, "err", err)
		}
	})
}

// networkDone takes a start's view of its pod's network into the loop.
func (d *Daemon) networkDone(uid types.UID, nw *podNetwork) {
	if nw == nil || d.podNets[uid] != nw {
		return
	}
	if nw.err != nil {
		delete(d.podNets, uid) // the next start tries again
		return
	}
	d.podIPs[uid] = nw.ips
}

// restoreNetworks reads the addresses of pods whose namespaces survived
// the daemon's restart (not a reboot: that empties the sandboxes).
func (d *Daemon) restoreNetworks() {
	for _, in := range d.machine.Instances() {
		if isProcessPod(in.Pod) || in.Pod.Spec.HostNetwork {
			continue
		}
		sb := sandbox.Sandbox{Dir: filepath.Join(d.cfg.Containerd.SandboxDir, string(in.UID()))}
		var rec networkRecord
		data, err := os.ReadFile(filepath.Join(d.podDir(in.UID()), networkFile))
		if err == nil && json.Unmarshal(data, &rec) == nil && sb.Exists(sandbox.Net) {
			d.podIPs[in.UID()] = rec.IPs
		}
	}
}

// teardownNetwork detaches a forgotten pod from the network.
func (d *Daemon) teardownNetwork(uid types.UID) {
	delete(d.podIPs, uid)
	delete(d.podNets, uid)
	var rec networkRecord
	data, err := os.ReadFile(filepath.Join(d.podDir(uid), networkFile))
	if err != nil || json.Unmarshal(data, &rec) != nil || d.ctrd == nil {
		return
	}
	if err := d.ctrd.TeardownNetwork(containerd.NetworkArgs{PodUID: string(uid), NetNS: rec.NetNS, Ports: rec.Ports}); err != nil {
		d.log.Warn("detaching a pod from the network", "pod", uid, "err", err)
	}
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
