package supervisor

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/test/linked"
)

// The hub attaches from outside (sync/uplink, wired by cmd/podvisor):
// the daemon links nothing of the hub's wire, storage or agent.
func TestSupervisorImportsNothingFromSync(t *testing.T) {
	for _, pkg := range linked.Packages(t, ".") {
		if strings.HasPrefix(pkg, "github.com/podvisor/podvisor/sync/") {
			t.Errorf("supervisor imports %s", pkg)
		}
	}
}

// The hub's calls reach the daemon's desired pods on its loop: the file
// pod of the same name wins, and the hub pods given run.
func TestAssignmentsReachTheLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	hub := d.Assignments()
	hub.ExpectAssigned(1, nil, nil)
	if hub.PodEvents() == nil {
		t.Fatal("no pod events for an attached hub")
	}
	desireWebPod(t, d, `  - {name: app, image: host}`)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); d.loop(ctx, nil, nil) }()
	defer func() { cancel(); <-loopDone }()

	hubPod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	}
	conflicts, err := hub.Conflicts([]*v1.Pod{hubPod("web"), hubPod("db")})
	if err != nil || len(conflicts) != 1 || !strings.Contains(conflicts["default/web"], "manifest file") {
		t.Fatalf("conflicts %v (%v), want default/web shadowed by its manifest file", conflicts, err)
	}
	hub.ApplyAssigned(2, []*v1.Pod{hubPod("web"), hubPod("db")}, nil)
	var sources []string
	d.inbox.do(func() error { // after the step that follows ApplyAssigned
		for _, in := range d.machine.Instances() {
			sources = append(sources, in.Key()+" "+in.Pod.Annotations[manifest.AnnotationSource])
		}
		return nil
	})
	if got := strings.Join(sources, ", "); got != "default/db hub, default/web file" {
		t.Fatalf("instances %s, want default/db from the hub and default/web from its file", got)
	}
}
