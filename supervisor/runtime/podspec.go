package runtime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/hostcmd"
	"github.com/podvisor/podvisor/pod/objects"
)

// DefaultPath is PATH for containers that do not set one: the one the
// shim and the probes look commands up in.
const DefaultPath = hostcmd.DefaultPath

// Process is a container's main process as Kubernetes resolves it from
// the pod, whatever runs it.
type Process struct {
	Argv []string
	// Command is how many of Argv's elements come from the container's
	// command (the rest from its args): an image's entrypoint or cmd
	// stays where the pod sets none.
	Command int
	Env     []string
	Dir     string
	UID     *uint32
	GID     *uint32
	// Groups are the supplementary groups (SupplementalGroups: the
	// fsGroup, then supplementalGroups).
	Groups []uint32
	// SecretEnv names the variables of Env whose value holds a Secret's
	// data: set from a secretKeyRef or an envFrom secretRef, or expanded
	// from such a variable ($(VAR)). Any: Argv may hold it too (see
	// Secret). nil when none does.
	SecretEnv map[string]bool
}

// Secret reports whether the process's Env, and so maybe its Argv, holds
// a Secret's data: what must stay off persistent storage.
func (p Process) Secret() bool { return len(p.SecretEnv) > 0 }

// PodEnv is what the downward API can tell a container about its pod.
type PodEnv struct {
	NodeName string
	HostIP   string
	// Allocatable is the node's, for resourceFieldRef limits a container
	// does not set.
	Allocatable v1.ResourceList
	// Objects are the ConfigMaps and Secrets this pod may see (the daemon
	// chooses them per pod: a hub pod the hub's, a static pod those of
	// its manifest directory); nil: none, every reference is not found.
	Objects objects.Getter
}

// Resolve turns a container of a pod into its process: the environment
// as the kubelet makes it (makeEnvironmentVariables: envFrom sources
// first, then env, whose $(VAR) references expand to what is set before
// them; fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef
// values filled in), command and args expanded as Kubernetes does, and
// the user and group to run as. node.Objects gives the ConfigMaps and
// Secrets the pod may see; an error reading one is the kubelet's, for the
// container to wait with as CreateContainerConfigError.
func Resolve(pod *v1.Pod, c *v1.Container, node PodEnv) (Process, error) {
	vars := map[string]string{"PATH": DefaultPath, "HOSTNAME": PodHostname(pod)}
	order := []string{"PATH", "HOSTNAME"}
	secret := map[string]bool{} // the variables holding a Secret's data
	set := func(name, value string, fromSecret bool) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
		if fromSecret {
			secret[name] = true
		} else {
			delete(secret, name)
		}
	}
	from := &envObjects{getter: node.Objects, namespace: pod.Namespace}
	if err := from.envFrom(c, set); err != nil {
		return Process{}, err
	}
	for _, e := range c.Env {
		v, tainted := expandTainted(e.Value, vars, secret)
		switch f := e.ValueFrom; {
		case f == nil:
		case f.FieldRef != nil:
			var err error
			if v, err = FieldValue(pod, f.FieldRef.FieldPath, node); err != nil {
				return Process{}, fmt.Errorf("env %s: %w", e.Name, err)
			}
		case f.ResourceFieldRef != nil:
			var err error
			if v, err = ResourceValue(f.ResourceFieldRef, pod, c, node.Allocatable); err != nil {
				return Process{}, fmt.Errorf("env %s: %w", e.Name, err)
			}
		default:
			val, skip, err := from.keyRef(f)
			if err != nil {
				return Process{}, err
			}
			if skip {
				continue // optional and missing: not set at all, as in the kubelet
			}
			v, tainted = val, f.SecretKeyRef != nil
		}
		set(e.Name, v, tainted)
	}
	env := make([]string, len(order))
	for i, k := range order {
		env[i] = k + "=" + vars[k]
	}
	var argv []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, expand(a, vars))
	}
	s := Process{Argv: argv, Command: len(c.Command), Env: env, Dir: c.WorkingDir}
	if len(secret) > 0 {
		s.SecretEnv = secret
	}
	user, group := pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.RunAsGroup
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			user = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			group = sc.RunAsGroup
		}
	}
	if user != nil {
		u := uint32(*user)
		s.UID = &u
		if group == nil {
			group = user // as runc does when no group is given
		}
	}
	if group != nil {
		g := uint32(*group)
		s.GID = &g
	}
	for _, g := range SupplementalGroups(pod) {
		s.Groups = append(s.Groups, uint32(g))
	}
	return s, nil
}

// SupplementalGroups are the supplementary groups of a pod's containers
// as the kubelet gives them (determineEffectiveSecurityContext): the
// pod's fsGroup first, then its supplementalGroups. The fsGroup is what
// lets a non-root container read the volumes given that group.
func SupplementalGroups(pod *v1.Pod) []int64 {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return nil
	}
	var groups []int64
	if sc.FSGroup != nil {
		groups = append(groups, *sc.FSGroup)
	}
	return append(groups, sc.SupplementalGroups...)
}

// hostnameMaxLen is the longest hostname: 64 bytes with the terminating
// NUL.
const hostnameMaxLen = 63

// PodHostname is a pod's hostname as the kubelet makes it
// (GeneratePodHostNameAndDomain, truncatePodHostnameIfNeeded):
// spec.hostname, else the pod's name, cut to 63 characters without a
// trailing '-' or '.'.
func PodHostname(pod *v1.Pod) string {
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if len(hostname) <= hostnameMaxLen {
		return hostname
	}
	return strings.TrimRight(hostname[:hostnameMaxLen], "-.")
}

// FieldValue is the value of a downward-API field of a pod.
func FieldValue(pod *v1.Pod, path string, node PodEnv) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return node.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.podIP", "status.hostIPs", "status.podIPs":
		// Process pods share the host network, whose one address is the
		// node's; the plural fields are comma-separated lists, as the
		// kubelet gives them (containerd pods get their own pod IPs, see
		// the containerd runtime's withPodIP).
		return node.HostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels['": pod.Labels, "metadata.annotations['": pod.Annotations} {
		if strings.HasPrefix(path, prefix) && strings.HasSuffix(path, "']") {
			return m[path[len(prefix):len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("fieldPath %q is not supported", path)
}

// expand replaces $(NAME) with the variable's value as Kubernetes does:
// unknown references stay as written and $$ escapes a dollar.
func expand(s string, vars map[string]string) string {
	return expandWith(s, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
}

// expandTainted is expand that also reports whether a variable of
// secret was substituted: the result then holds a Secret's data.
func expandTainted(s string, vars map[string]string, secret map[string]bool) (string, bool) {
	tainted := false
	out := expandWith(s, func(name string) (string, bool) {
		v, ok := vars[name]
		if ok && secret[name] {
			tainted = true
		}
		return v, ok
	})
	return out, tainted
}

// expandWith is expand with a lookup: a reference it does not know stays
// as written.
func expandWith(s string, lookup func(name string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
