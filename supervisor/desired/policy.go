package desired

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/podsecurity"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Policy is what the device owner allows pods, whatever their source.
type Policy struct {
	// ForbidPrivileged refuses privileged containers, hostPID and
	// hostIPC.
	ForbidPrivileged bool
	// AllowedHostPaths, when set, are the only host directories hostPath
	// volumes may name (the paths themselves or below them).
	AllowedHostPaths []string
	// Hub is what the hub may run here on top of the rest: a Pod
	// Security Standards level, process pods, image sources. Nil is the
	// default (baseline, no process pods). The device's own manifest
	// files are trusted and not held to it.
	Hub *podsecurity.Policy
}

// defaultHubPolicy is the hub policy of a config that sets none.
var defaultHubPolicy = sync.OnceValue(func() *podsecurity.Policy {
	p, err := podsecurity.New(podsecurity.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	return p
})

// LocalImages is what a pod may use of the images on the device: any for
// the device's own (file) pods; for every other pod, only images pulled
// from a registry and those the owner shares (hub.images.shared), so a
// hub pod cannot name the owner's side-loaded images.
func (p Policy) LocalImages(pod *v1.Pod) *runtime.LocalImages {
	if pod.Annotations[manifest.AnnotationSource] == manifest.SourceFile {
		return nil
	}
	hub := p.Hub
	if hub == nil {
		hub = defaultHubPolicy()
	}
	return &runtime.LocalImages{Shared: hub.SharedImages()}
}

// CheckHub returns why a pod from the hub may not run here, or nil: the
// policy for every pod and then the hub's own.
func (p Policy) CheckHub(pod *v1.Pod) error {
	if err := p.Check(pod); err != nil {
		return err
	}
	hub := p.Hub
	if hub == nil {
		hub = defaultHubPolicy()
	}
	return hub.Check(pod)
}

// Check returns why a pod breaks the policy, or nil.
func (p Policy) Check(pod *v1.Pod) error {
	if p.ForbidPrivileged {
		if pod.Spec.HostPID || pod.Spec.HostIPC {
			return fmt.Errorf("pod %q: spec.hostPID/hostIPC: forbidden by this device's policy (security.forbidPrivileged)", pod.Name)
		}
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range list {
				if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
					return fmt.Errorf("pod %q: container %q: securityContext.privileged: forbidden by this device's policy (security.forbidPrivileged)", pod.Name, c.Name)
				}
			}
		}
	}
	if len(p.AllowedHostPaths) == 0 {
		return nil
	}
	for i, v := range pod.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if !p.hostPathAllowed(v.HostPath.Path) {
			return fmt.Errorf("pod %q: spec.volumes[%d].hostPath.path: %s is outside the host paths this device allows (%s)",
				pod.Name, i, v.HostPath.Path, strings.Join(p.AllowedHostPaths, ", "))
		}
	}
	return nil
}

func (p Policy) hostPathAllowed(path string) bool {
	path = filepath.Clean(path)
	for _, prefix := range p.AllowedHostPaths {
		prefix = filepath.Clean(prefix)
		if path == prefix || strings.HasPrefix(path, strings.TrimSuffix(prefix, "/")+"/") {
			return true
		}
	}
	return false
}
