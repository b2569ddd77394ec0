package podfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// The kubelet's /etc/hosts headers (kubelet_pods.go): a tool that reads
// the file can tell it is managed, and for which kind of pod.
const (
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// etcHosts is where a container's hosts file goes; a container that
// mounts a volume there keeps its own, as with the kubelet.
const etcHosts = "/etc/hosts"

// podIPPlaceholder stands for the pod's address in its hosts file until
// the pod network gives it one.
const podIPPlaceholder = runtime.PodIPPlaceholder

// managedHostsFile is a pod's /etc/hosts as the kubelet writes it
// (managedHostsFileContent): localhost entries, one line per pod IP with
// the hostname, then the pod's hostAliases.
func managedHostsFile(ips []string, hostname string, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range ips {
		fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
	}
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// nodeHostsFile is a host-network pod's /etc/hosts as the kubelet writes
// it (nodeHostsFileContent): the node's file under its own header, then
// the pod's hostAliases.
func nodeHostsFile(node []byte, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeaderWithHostNetwork)
	b.Write(node)
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

func hostAliasEntries(aliases []v1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.Bytes()
}

// writePodHosts writes a pod's hosts file once: a file already bound into
// its containers keeps the address the pod network wrote into it.
func writePodHosts(path string, pod *v1.Pod, hostname string) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	content := managedHostsFile([]string{podIPPlaceholder}, hostname, pod.Spec.HostAliases)
	if pod.Spec.HostNetwork {
		// A device without a hosts file of its own gets the managed one.
		node, err := os.ReadFile(etcHosts)
		switch {
		case err == nil:
			content = nodeHostsFile(node, pod.Spec.HostAliases)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("reading the node's %s: %w", etcHosts, err)
		}
	}
	return os.WriteFile(path, content, 0o644)
}

// mountsOwnHosts reports whether a container mounts a volume at
// /etc/hosts (then the kubelet does not manage its hosts file).
func mountsOwnHosts(c *v1.Container) bool {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == etcHosts {
			return true
		}
	}
	return false
}
