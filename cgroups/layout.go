package cgroups

import (
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Layout names the cgroups of the QoS tiers, pods and containers under a
// root, as the kubelet names kubepods. Paths are relative to the cgroup
// mount.
//
// cgroupfs (Systemd false), root "podvisor":
//
//	podvisor/pod<uid>/<container>                Guaranteed
//	podvisor/burstable/pod<uid>/<container>
//	podvisor/besteffort/pod<uid>/<container>
//	podvisor/shims                               every container's shim
//
// systemd (Systemd true), the same tree as slices, containers as scopes:
//
//	podvisor.slice/podvisor-pod<uid>.slice/podvisor-<uid>-<container>.scope
//	podvisor.slice/podvisor-burstable.slice/podvisor-burstable-pod<uid>.slice/…
//
// A UID's dashes become underscores there: a dash in a slice's name means
// "child of".
type Layout struct {
	Root    string
	Systemd bool
}

// Tiers are the root and the QoS tier cgroups, made at start.
func (l Layout) Tiers() []string {
	return []string{l.join(), l.join("burstable"), l.join("besteffort")}
}

// Pod is the cgroup of a pod of the QoS class.
func (l Layout) Pod(qos v1.PodQOSClass, uid types.UID) string {
	pod := "pod" + l.escape(uid)
	switch qos {
	case v1.PodQOSGuaranteed:
		return l.join(pod)
	case v1.PodQOSBurstable:
		return l.join("burstable", pod)
	}
	return l.join("besteffort", pod)
}

// Pods are the places a pod's cgroup can be, whatever its QoS.
func (l Layout) Pods(uid types.UID) []string {
	var out []string
	for _, q := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		out = append(out, l.Pod(q, uid))
	}
	return out
}

// Container is the cgroup of a container in its pod's cgroup.
func (l Layout) Container(podPath string, uid types.UID, name string) string {
	if !l.Systemd {
		return path.Join(podPath, name)
	}
	return path.Join(podPath, l.prefix()+"-"+l.escape(uid)+"-"+name+".scope")
}

// Runc is where runc puts a container, named by its ID, in its pod's
// cgroup: the cgroup's path, and the spec's cgroupsPath that makes runc
// put it there ("/path" for cgroupfs; "slice:prefix:id" for runc's
// systemd driver, which makes the scope "prefix-id.scope" in the slice).
func (l Layout) Runc(podPath, id string) (cgroup, cgroupsPath string) {
	if !l.Systemd {
		p := path.Join(podPath, id)
		return p, "/" + strings.TrimPrefix(p, "/")
	}
	return path.Join(podPath, l.prefix()+"-"+id+".scope"), path.Base(podPath) + ":" + l.prefix() + ":" + id
}

// prefix is the root's slice prefix: "podvisor" for root "podvisor",
// "edge-podvisor" for "edge/podvisor".
func (l Layout) prefix() string {
	return strings.ReplaceAll(strings.Trim(l.Root, "/"), "/", "-")
}

// join is the cgroup of the root's descendant along parts: directories
// for cgroupfs; for systemd, a slice per level named after every level
// above it, as systemd nests "a-b.slice" in "a.slice".
func (l Layout) join(parts ...string) string {
	if !l.Systemd {
		return path.Join(append([]string{l.Root}, parts...)...)
	}
	names := append(strings.Split(strings.Trim(l.Root, "/"), "/"), parts...)
	var dirs []string
	for i := range names {
		dirs = append(dirs, strings.Join(names[:i+1], "-")+".slice")
	}
	return path.Join(dirs...)
}

func (l Layout) escape(uid types.UID) string {
	if !l.Systemd {
		return string(uid)
	}
	return strings.ReplaceAll(string(uid), "-", "_")
}
