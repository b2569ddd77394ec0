package schedule

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fencedFleet places a Deployment and a DaemonSet on three devices, adds
// a bare pod that tolerates everything and one terminating gracefully on
// the device of a web pod, and fences that device.
func fencedFleet(t *testing.T) (in Input, fenced string, on []string) {
	t.Helper()
	web := deployment("web", 2, kv("app=web"), "100m", "")
	agent := daemonSet("agent", kv("app=agent"), "10m", "")
	in = Input{Now: t0, Devices: []Device{device("a"), device("b"), device("c")},
		Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	in = apply(in, Schedule(in), t0)
	for _, p := range in.Pods {
		if strings.HasPrefix(p.Name, "web-") {
			fenced = p.Spec.NodeName
			break
		}
	}
	bare := pod("bare", fenced, nil, "", "")
	bare.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	slow := pod("slow", fenced, nil, "", "")
	ts := metav1.NewTime(t0)
	slow.DeletionTimestamp = &ts
	in.Pods = append(in.Pods, bare, slow)
	on = append(podsOn(in, fenced), "slow")
	for i := range in.Devices {
		if in.Devices[i].Name == fenced {
			in.Devices[i].Fenced = true
		}
	}
	in.Now = t0.Add(time.Second)
	return in, fenced, on
}

// A fenced device the hub does not hear from: every pod bound there is
// force-deleted at once, whatever it tolerates, terminating ones too, and
// replaced elsewhere in the same pass; nothing new goes there.
func TestFencedUnreachableDevicePodsForceDeletedAndReplaced(t *testing.T) {
	in, fenced, on := fencedFleet(t)
	for i := range in.Devices {
		if in.Devices[i].Name == fenced {
			in.Devices[i].UnreachableSince = t0
		}
	}
	plan := Schedule(in)
	for _, name := range on {
		d, ok := deletionOf(plan, name)
		if !ok || !d.Force || d.Reason != ReasonPodGC || !strings.Contains(d.Message, "fenced") {
			t.Errorf("pod %s on the fenced device: deletion %+v (found %v), want forced %s naming the fence", name, d, ok, ReasonPodGC)
		}
	}
	var webReplaced bool
	for _, p := range plan.Create {
		if strings.HasPrefix(p.Name, "web-") {
			webReplaced = true
			if dev := bindingOf(plan, p.Name); dev == fenced || dev == "" {
				t.Errorf("replacement %s bound to %q", p.Name, dev)
			}
		}
	}
	if !webReplaced {
		t.Fatalf("the web pod was not replaced in the same pass: created %d", len(plan.Create))
	}
	for _, b := range plan.Bindings {
		if b.Device == fenced {
			t.Errorf("pod %s bound to the fenced device", b.Pod)
		}
	}
}

// A fenced device still heard from carries the out-of-service taint: its
// pods that do not tolerate it are evicted gracefully (its device stops
// them and confirms, as any), and nothing new that does not tolerate it
// lands there; no pod is forgotten before its device says it stopped.
func TestFencedHeardDeviceEvictsGracefully(t *testing.T) {
	in, fenced, _ := fencedFleet(t)
	plan := Schedule(in)
	for _, d := range plan.Deletions {
		if d.Force {
			t.Errorf("%s force-deleted while its device is heard from", d.Pod)
		}
	}
	for _, name := range podsOn(in, fenced) {
		d, ok := deletionOf(plan, name)
		if name == "bare" {
			if ok {
				t.Errorf("bare tolerates every taint and was deleted: %+v", d)
			}
			continue
		}
		if !ok || d.Reason != ReasonTaint {
			t.Errorf("pod %s: deletion %+v (found %v), want the taint manager's", name, d, ok)
		}
	}
	for _, b := range plan.Bindings {
		if b.Device == fenced {
			t.Errorf("pod %s bound to the fenced device", b.Pod)
		}
	}
	for _, p := range plan.Create {
		if strings.HasPrefix(p.Name, "agent-") {
			t.Errorf("a DaemonSet pod %s was made for the fenced device", p.Name)
		}
	}
}
