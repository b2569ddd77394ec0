package desired

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/podsecurity"
)

func TestPolicy(t *testing.T) {
	yes := true
	privileged := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "c", SecurityContext: &v1.SecurityContext{Privileged: &yes}}}}}
	hostPath := func(path string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "v", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}}}}}
	}
	open := Policy{}
	if open.Check(privileged) != nil || open.Check(hostPath("/etc")) != nil {
		t.Fatal("the default policy refused a pod")
	}
	strict := Policy{ForbidPrivileged: true, AllowedHostPaths: []string{"/var/lib/apps/"}}
	if err := strict.Check(privileged); err == nil || !strings.Contains(err.Error(), `container "c": securityContext.privileged`) {
		t.Fatalf("privileged: %v", err)
	}
	for path, ok := range map[string]bool{"/var/lib/apps": true, "/var/lib/apps/x": true, "/var/lib/apps2": false,
		"/var/lib/apps/../../etc": false, "/etc": false} {
		err := strict.Check(hostPath(path))
		if (err == nil) != ok {
			t.Errorf("hostPath %s: %v, want allowed=%v", path, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "spec.volumes[0].hostPath.path") {
			t.Errorf("error %q does not name the field", err)
		}
	}
	hostPID := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: v1.PodSpec{HostPID: true}}
	if strict.Check(hostPID) == nil {
		t.Error("hostPID allowed under forbidPrivileged")
	}
}

// A file pod may use any image on the device; a hub pod only pulled ones
// and those the owner shares, named as the plugin stores them; a pod
// stamped with no source counts as not the device's own.
func TestLocalImages(t *testing.T) {
	pod := func(source string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{manifest.AnnotationSource: source}}}
	}
	hub, err := podsecurity.New(podsecurity.Config{Images: podsecurity.ImageConfig{Shared: []string{"vendor-tools:2"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Hub: hub}
	if l := p.LocalImages(pod(manifest.SourceFile)); l != nil {
		t.Errorf("a file pod is limited to %+v", l)
	}
	for _, source := range []string{manifest.SourceHub, ""} {
		l := p.LocalImages(pod(source))
		if l == nil || len(l.Shared) != 1 || l.Shared[0] != "docker.io/library/vendor-tools:2" {
			t.Errorf("source %q: limited to %+v, want the shared docker.io/library/vendor-tools:2", source, l)
		}
	}
	if l := (Policy{}).LocalImages(pod(manifest.SourceHub)); l == nil || len(l.Shared) != 0 {
		t.Errorf("a hub pod under the default policy: %+v, want limited, nothing shared", l)
	}
}
