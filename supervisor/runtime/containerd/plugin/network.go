package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	gocni "github.com/containerd/go-cni"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// DefaultNetwork is the CNI configuration written when the configuration
// directory holds none: a bridge with host-local addresses, NAT to the
// outside, and hostPort mappings. Its subnet is not podman's (10.88/16),
// so both can run on one device.
const DefaultNetwork = `{
  "cniVersion": "1.0.0",
  "name": "podvisor",
  "plugins": [
    {"type": "bridge", "bridge": "podvisor0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// network loads the CNI configuration once, writing the default first
// where there is none.
type network struct {
	confDir string
	binDirs []string
	once    sync.Once
	cni     gocni.CNI
	err     error
}

func (n *network) load() (gocni.CNI, error) {
	n.once.Do(func() {
		if err := os.MkdirAll(n.confDir, 0o755); err != nil {
			n.err = err
			return
		}
		existing, _ := filepath.Glob(filepath.Join(n.confDir, "*.conf*"))
		if len(existing) == 0 {
			if n.err = os.WriteFile(filepath.Join(n.confDir, "10-podvisor.conflist"), []byte(DefaultNetwork), 0o644); n.err != nil {
				return
			}
		}
		n.cni, n.err = gocni.New(gocni.WithPluginConfDir(n.confDir), gocni.WithPluginDir(n.binDirs),
			gocni.WithMinNetworkCount(1), gocni.WithInterfacePrefix("eth"))
		if n.err == nil {
			n.err = n.cni.Load(gocni.WithDefaultConf)
		}
		if n.err != nil {
			n.err = fmt.Errorf("CNI configuration in %s (plugins in %s): %w", n.confDir, strings.Join(n.binDirs, ":"), n.err)
		}
	})
	return n.cni, n.err
}

func portMappings(ports []pluginapi.PortMapping) []gocni.PortMapping {
	var out []gocni.PortMapping
	for _, p := range ports {
		out = append(out, gocni.PortMapping{HostPort: p.HostPort, ContainerPort: p.ContainerPort,
			Protocol: strings.ToLower(p.Protocol), HostIP: p.HostIP})
	}
	return out
}

func cniLabels(a pluginapi.NetworkArgs) gocni.NamespaceOpts {
	return gocni.WithLabels(map[string]string{"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": a.Namespace, "K8S_POD_NAME": a.Name,
		"K8S_POD_INFRA_CONTAINER_ID": a.PodUID, "K8S_POD_UID": a.PodUID})
}

// SetupNetwork attaches a pod's network namespace to the CNI network and
// returns its addresses.
func (p *Plugin) SetupNetwork(a pluginapi.NetworkArgs, reply *pluginapi.NetworkReply) error {
	cni, err := p.net.load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	opts := []gocni.NamespaceOpts{gocni.WithCapabilityPortMap(portMappings(a.Ports)), cniLabels(a)}
	res, err := cni.Setup(ctx, a.PodUID, a.NetNS, opts...)
	if err != nil {
		// A failed ADD may leave half an attachment (an interface, an
		// address), and a pod recreated with the same UID after a crash
		// may find its old address still allocated: undo both, once.
		cni.Remove(ctx, a.PodUID, a.NetNS, opts...)
		if res, err = cni.Setup(ctx, a.PodUID, a.NetNS, opts...); err != nil {
			cni.Remove(ctx, a.PodUID, a.NetNS, opts...)
			return fmt.Errorf("pod network: %w", err)
		}
	}
	for name, iface := range res.Interfaces {
		if !strings.HasPrefix(name, "eth") {
			continue
		}
		for _, ip := range iface.IPConfigs {
			reply.IPs = append(reply.IPs, ip.IP.String())
		}
	}
	if len(reply.IPs) == 0 {
		return fmt.Errorf("pod network: CNI gave pod %s no address", a.Name)
	}
	return nil
}

// TeardownNetwork detaches a pod from the network and releases its
// addresses and port mappings; a namespace already gone is fine.
func (p *Plugin) TeardownNetwork(a pluginapi.NetworkArgs, _ *pluginapi.Empty) error {
	cni, err := p.net.load()
	if err != nil {
		return err
	}
	if err := cni.Remove(context.Background(), a.PodUID, a.NetNS, gocni.WithCapabilityPortMap(portMappings(a.Ports)), cniLabels(a)); err != nil {
		return fmt.Errorf("pod network teardown: %w", err)
	}
	return nil
}
