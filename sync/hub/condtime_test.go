package hub_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

const webYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]
`

// heartbeatReady sends a heartbeat whose Ready condition has the status
// and the transition time the device claims.
func (r *schedRig) heartbeatReady(id string, status v1.ConditionStatus, claimed time.Time) {
	r.t.Helper()
	node := v1.NodeStatus{
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status,
			LastTransitionTime: metav1.NewTime(claimed), LastHeartbeatTime: metav1.NewTime(claimed)}},
	}
	if _, _, err := r.fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: r.now, Node: node}, r.now); err != nil {
		r.t.Fatal(err)
	}
}

// A device's claimed Ready transition time does not decide when its pods
// are evicted: the not-ready taint is timed from when the hub saw the
// change.
func TestNotReadyEvictionTimedByTheHub(t *testing.T) {
	r := newSchedRig(t, map[string]string{"a": "z1"})
	r.apply(webYAML)
	r.pass()
	if live, _ := r.placed(); len(live["web"]) != 1 {
		t.Fatalf("web placed on %v", live["web"])
	}
	wentDown := r.now
	r.heartbeatReady("a", v1.ConditionFalse, wentDown.Add(-time.Hour)) // claims an hour ago
	d, err := r.fleet.GetDevice("a", r.now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Node.Conditions[0].LastTransitionTime.Time; !got.Equal(wentDown) {
		t.Fatalf("stored Ready transition %v, want the hub's %v", got, wentDown)
	}
	r.pass()
	if live, term := r.placed(); len(live["web"]) != 1 || len(term) != 0 {
		t.Fatalf("evicted at once: live %v terminating %v", live, term)
	}
	// Still not ready, claiming other times: the hub keeps its own.
	r.now = wentDown.Add(299 * time.Second)
	r.heartbeatReady("a", v1.ConditionFalse, r.now.Add(time.Hour))
	r.pass()
	if live, term := r.placed(); len(live["web"]) != 1 || len(term) != 0 {
		t.Fatalf("evicted before 300 s: live %v terminating %v", live, term)
	}
	r.now = wentDown.Add(300 * time.Second)
	r.heartbeatReady("a", v1.ConditionFalse, wentDown)
	r.pass()
	if _, term := r.placed(); len(term) != 1 || term[0] != "web@a" {
		t.Fatalf("terminating %v after 300 s, want web@a", term)
	}
}

// The pass wakes up when a pod's toleration of the not-ready taint runs
// out, not only at the next stale heartbeat.
func TestNotReadyTolerationWakesThePass(t *testing.T) {
	r := newSchedRig(t, map[string]string{"a": "z1"})
	r.apply(webYAML + `      tolerations:
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 10}
`)
	r.pass()
	wentDown := r.now
	r.heartbeatReady("a", v1.ConditionFalse, wentDown)
	if next, want := r.pass(), wentDown.Add(10*time.Second); !next.Equal(want) {
		t.Fatalf("next pass at %v, want %v (the toleration runs out)", next, want)
	}
	r.now = wentDown.Add(10 * time.Second)
	r.pass()
	if _, term := r.placed(); len(term) != 1 || term[0] != "web@a" {
		t.Fatalf("terminating %v, want web@a", term)
	}
}

// An operator's NoExecute taint is timed from when it was set: a pod
// tolerating it for a minute stays that minute.
func TestOperatorNoExecuteTaintIsTimedFromItsSetting(t *testing.T) {
	r := newSchedRig(t, map[string]string{"a": "z1"})
	r.apply(webYAML + `      tolerations:
      - {key: maintenance, operator: Exists, effect: NoExecute, tolerationSeconds: 60}
`)
	r.pass()
	r.now = r.now.Add(time.Hour)
	set := r.now
	r.heartbeat("a")
	if err := r.fleet.SetTaint("a", v1.Taint{Key: "maintenance", Effect: v1.TaintEffectNoExecute}, false, set); err != nil {
		t.Fatal(err)
	}
	if next, want := r.pass(), set.Add(time.Minute); next.After(want) {
		t.Fatalf("next pass at %v, want by %v", next, want)
	}
	if live, term := r.placed(); len(live["web"]) != 1 || len(term) != 0 {
		t.Fatalf("evicted at once: live %v terminating %v", live, term)
	}
	r.now = set.Add(time.Minute)
	r.heartbeat("a")
	r.pass()
	if _, term := r.placed(); len(term) != 1 || term[0] != "web@a" {
		t.Fatalf("terminating %v after the minute, want web@a", term)
	}
}
