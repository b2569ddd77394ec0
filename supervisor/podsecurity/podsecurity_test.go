package podsecurity

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

// pod is a containerd pod of one container; change edits it.
func pod(change func(p *v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36"}}}}
	if change != nil {
		change(p)
	}
	return p
}

// processPod is a process pod of one container.
func processPod(change func(p *v1.Pod)) *v1.Pod {
	return pod(func(p *v1.Pod) {
		p.Spec.RuntimeClassName = ptr("process")
		p.Spec.Containers[0].Image = "host"
		if change != nil {
			change(p)
		}
	})
}

func sc(p *v1.Pod) *v1.SecurityContext {
	if p.Spec.Containers[0].SecurityContext == nil {
		p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{}
	}
	return p.Spec.Containers[0].SecurityContext
}

// restrictedOK meets the restricted level.
func restrictedOK(p *v1.Pod) {
	s := sc(p)
	s.RunAsNonRoot, s.AllowPrivilegeEscalation = ptr(true), ptr(false)
	s.Capabilities = &v1.Capabilities{Drop: []v1.Capability{"ALL"}}
	s.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
}

func TestCheck(t *testing.T) {
	hostPath := v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}}
	for _, tc := range []struct {
		name string
		cfg  Config
		pod  *v1.Pod
		want []string // substrings of the refusal; none: allowed
	}{
		{"baseline allows a plain pod", Config{}, pod(nil), nil},
		{"baseline refuses hostNetwork", Config{}, pod(func(p *v1.Pod) { p.Spec.HostNetwork = true }),
			[]string{`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`, "hub.podSecurity"}},
		{"baseline refuses hostPID and hostIPC", Config{}, pod(func(p *v1.Pod) { p.Spec.HostPID, p.Spec.HostIPC = true, true }),
			[]string{"host namespaces (hostPID=true, hostIPC=true)"}},
		{"baseline refuses privileged", Config{}, pod(func(p *v1.Pod) { sc(p).Privileged = ptr(true) }),
			[]string{`privileged (container "c" must not set securityContext.privileged=true)`}},
		{"baseline refuses SYS_ADMIN, SYS_MODULE, NET_ADMIN", Config{}, pod(func(p *v1.Pod) {
			sc(p).Capabilities = &v1.Capabilities{Add: []v1.Capability{"SYS_ADMIN", "SYS_MODULE", "NET_ADMIN"}}
		}), []string{`non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_MODULE" in securityContext.capabilities.add)`}},
		{"baseline refuses hostPath volumes", Config{}, pod(func(p *v1.Pod) { p.Spec.Volumes = []v1.Volume{hostPath} }),
			[]string{`hostPath volumes (volume "h")`}},
		{"baseline refuses seccomp Unconfined", Config{}, pod(func(p *v1.Pod) {
			sc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}
		}), []string{`seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")`}},
		{"baseline refuses pod-level seccomp Unconfined", Config{}, pod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}
		}), []string{`seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")`}},
		{"baseline refuses AppArmor unconfined", Config{}, pod(func(p *v1.Pod) {
			sc(p).AppArmorProfile = &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		}), []string{`forbidden AppArmor profile`, "Unconfined"}},
		{"baseline refuses the AppArmor unconfined annotation", Config{}, pod(func(p *v1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
		}), []string{`forbidden AppArmor profile`, "unconfined"}},
		{"baseline refuses hostPort", Config{}, pod(func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}), []string{`hostPort (container "c" uses hostPort 8080)`}},
		{"baseline names every rule broken", Config{}, pod(func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Volumes = []v1.Volume{hostPath}
		}), []string{"host namespaces (hostNetwork=true)", `hostPath volumes (volume "h")`}},
		{"baseline allows runAsUser 0", Config{}, pod(func(p *v1.Pod) { sc(p).RunAsUser = ptr(int64(0)) }), nil},
		{"restricted refuses a plain pod", Config{Level: "restricted"}, pod(nil),
			[]string{`violates PodSecurity "restricted:latest"`, "allowPrivilegeEscalation != false", "unrestricted capabilities",
				"runAsNonRoot != true", "seccompProfile"}},
		{"restricted refuses runAsUser 0", Config{Level: "restricted"}, pod(func(p *v1.Pod) {
			restrictedOK(p)
			sc(p).RunAsUser = ptr(int64(0))
		}), []string{`runAsUser=0 (container "c" must not set runAsUser=0)`}},
		{"restricted refuses missing runAsNonRoot", Config{Level: "restricted"}, pod(func(p *v1.Pod) {
			restrictedOK(p)
			sc(p).RunAsNonRoot = nil
		}), []string{`runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)`}},
		{"restricted allows a restricted pod", Config{Level: "restricted"}, pod(restrictedOK), nil},
		{"a version pins the standards", Config{Level: "restricted", Version: "v1.22"}, pod(nil),
			[]string{`violates PodSecurity "restricted:v1.22"`}},
		{"privileged allows all", Config{Level: "privileged"}, pod(func(p *v1.Pod) {
			p.Spec.HostNetwork, p.Spec.HostPID = true, true
			p.Spec.Volumes = []v1.Volume{hostPath}
			sc(p).Privileged = ptr(true)
			sc(p).Capabilities = &v1.Capabilities{Add: []v1.Capability{"SYS_ADMIN"}}
		}), nil},

		{"process pods are refused by default", Config{}, processPod(func(p *v1.Pod) { sc(p).RunAsUser = ptr(int64(1000)) }),
			[]string{"spec.runtimeClassName: process pods", "hub.allowProcessPods"}},
		{"process pods are refused under privileged too", Config{Level: "privileged"}, processPod(nil),
			[]string{"hub.allowProcessPods"}},
		{"an allowed process pod with no runAsUser runs as root: refused", Config{AllowProcessPods: true}, processPod(nil),
			[]string{`spec.securityContext.runAsUser: unset, so process container "c" would run as root`, "hub.allowRootProcessPods"}},
		{"an allowed process pod with runAsUser 0: refused", Config{AllowProcessPods: true}, processPod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr(int64(1000))}
			sc(p).RunAsUser = ptr(int64(0))
		}), []string{`spec.containers[0].securityContext.runAsUser: 0 runs process container "c" as root`}},
		{"an allowed process pod with runAsGroup 0: refused", Config{AllowProcessPods: true}, processPod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(0))}
		}), []string{`spec.securityContext.runAsGroup: 0 runs process container "c" in the root group`}},
		{"a root init container is named", Config{AllowProcessPods: true}, processPod(func(p *v1.Pod) {
			sc(p).RunAsUser = ptr(int64(1000))
			p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "host"}}
		}), []string{`process container "init" would run as root`}},
		{"an allowed process pod as a user runs", Config{AllowProcessPods: true}, processPod(func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr(int64(1000))}
		}), nil},
		{"no runAsUser under a non-root daemon is that user", Config{AllowProcessPods: true, DefaultUID: 1000}, processPod(nil), nil},
		{"root process pods when allowed", Config{AllowProcessPods: true, AllowRootProcessPods: true}, processPod(nil), nil},
		{"allowed root does not pass runAsNonRoot", Config{AllowProcessPods: true, AllowRootProcessPods: true, Level: "restricted"},
			processPod(restrictedOK), []string{`spec.securityContext.runAsUser: process container "c" sets runAsNonRoot but would run as root`}},
		{"restricted process pod as a user", Config{AllowProcessPods: true, Level: "restricted"},
			processPod(func(p *v1.Pod) { restrictedOK(p); sc(p).RunAsUser = ptr(int64(1000)) }), nil},
		{"an allowed process pod still meets the level", Config{AllowProcessPods: true, AllowRootProcessPods: true},
			processPod(func(p *v1.Pod) { sc(p).Capabilities = &v1.Capabilities{Add: []v1.Capability{"SYS_ADMIN"}} }),
			[]string{"non-default capabilities"}},
		{"process pods' image is not an image", Config{AllowProcessPods: true, AllowRootProcessPods: true,
			Images: ImageConfig{Registries: []string{"ghcr.io"}, RequireDigest: true}}, processPod(nil), nil},

		{"a listed registry", Config{Images: ImageConfig{Registries: []string{"docker.io"}}}, pod(nil), nil},
		{"a short Docker Hub name is docker.io/library", Config{Images: ImageConfig{Registries: []string{"docker.io/library"}}},
			pod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "busybox" }), nil},
		{"index.docker.io is docker.io", Config{Images: ImageConfig{Registries: []string{"index.docker.io"}}},
			pod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "busybox" }), nil},
		{"a path prefix is a whole component", Config{Images: ImageConfig{Registries: []string{"ghcr.io/acme"}}},
			pod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "ghcr.io/acme-evil/app:1" }),
			[]string{`spec.containers[0].image: "ghcr.io/acme-evil/app:1" is not from a registry this device allows hub pods (hub.images.registries: ghcr.io/acme)`}},
		{"below a path prefix", Config{Images: ImageConfig{Registries: []string{"ghcr.io/acme"}}},
			pod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "ghcr.io/acme/team/app:1" }), nil},
		{"an unlisted registry", Config{Images: ImageConfig{Registries: []string{"registry.local:5000"}}}, pod(nil),
			[]string{`spec.containers[0].image: "docker.io/library/busybox:1.36" is not from a registry`}},
		{"a short name is Docker Hub, not the listed registry", Config{Images: ImageConfig{Registries: []string{"registry.local:5000"}}},
			pod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "app" }), []string{`"app" is not from a registry`}},
		{"init containers are checked", Config{Images: ImageConfig{Registries: []string{"docker.io"}}},
			pod(func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{{Name: "i", Image: "quay.io/x/y"}} }),
			[]string{`spec.initContainers[0].image: "quay.io/x/y"`}},
		{"a digest is required", Config{Images: ImageConfig{RequireDigest: true}}, pod(nil),
			[]string{`spec.containers[0].image: "docker.io/library/busybox:1.36" is not pinned by digest (hub.images.requireDigest)`}},
		{"a pinned digest", Config{Images: ImageConfig{RequireDigest: true, Registries: []string{"docker.io"}}}, pod(func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "busybox@sha256:" + strings.Repeat("ab", 32)
		}), nil},
		{"a tag and a digest", Config{Images: ImageConfig{RequireDigest: true}}, pod(func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "busybox:1.36@sha256:" + strings.Repeat("ab", 32)
		}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Check(tc.pod)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed, want refused with %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), `pod "p": `) {
				t.Errorf("refusal %q does not name the pod", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Level: "base"}, "podSecurity"},
		{Config{Level: "Baseline"}, "podSecurity"},
		{Config{Version: "1.30"}, "podSecurityVersion"},
		{Config{Version: "v2.1"}, "podSecurityVersion"},
		{Config{AllowRootProcessPods: true}, "allowRootProcessPods"},
		{Config{Images: ImageConfig{Registries: []string{"busybox"}}}, "images.registries[0]"},
		{Config{Images: ImageConfig{Registries: []string{"ghcr.io", ""}}}, "images.registries[1]"},
		{Config{Images: ImageConfig{Registries: []string{"ghcr.io/Acme"}}}, "images.registries[0]"},
		{Config{Images: ImageConfig{Registries: make([]string, maxRegistries+1)}}, "images.registries"},
		{Config{Images: ImageConfig{Shared: []string{"vendor-tools:2", "Vendor App"}}}, "images.shared[1]"},
		{Config{Images: ImageConfig{Shared: []string{""}}}, "images.shared[0]"},
		{Config{Images: ImageConfig{Shared: make([]string, maxRegistries+1)}}, "images.shared"},
	} {
		_, err := New(tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.field)
		}
	}
	for _, ok := range []Config{{Level: "privileged"}, {Level: "restricted", Version: "v1.30"}, {Version: "latest"},
		{Images: ImageConfig{Registries: []string{"localhost:5000", "registry.local", "ghcr.io/acme/", "docker.io/library"}}}} {
		if _, err := New(ok); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// The shared local images are normalised as the plugin stores names, so a
// short name shares the image it stands for.
func TestSharedImages(t *testing.T) {
	p, err := New(Config{Images: ImageConfig{Shared: []string{"vendor-tools:2", " import.local/maps ", "ghcr.io/acme/app@sha256:" + strings.Repeat("a", 64)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docker.io/library/vendor-tools:2", "import.local/maps", "ghcr.io/acme/app@sha256:" + strings.Repeat("a", 64)}
	if got := p.SharedImages(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("shared %q, want %q", got, want)
	}
	if d, _ := New(Config{}); len(d.SharedImages()) != 0 {
		t.Fatalf("the default shares %q, want nothing", d.SharedImages())
	}
}

// A pod of many bad containers gets a bounded refusal.
func TestRefusalIsBounded(t *testing.T) {
	p, err := New(Config{Images: ImageConfig{RequireDigest: true}})
	if err != nil {
		t.Fatal(err)
	}
	bad := pod(func(p *v1.Pod) {
		for i := 0; i < 500; i++ {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i), Image: "busybox", Ports: []v1.ContainerPort{{HostPort: int32(1000 + i)}}})
		}
	})
	err = p.Check(bad)
	if err == nil || len(err.Error()) > maxReason+len("…") || !strings.HasSuffix(err.Error(), "…") {
		t.Fatalf("refusal of %d bytes: %.200v", len(err.Error()), err)
	}
}
