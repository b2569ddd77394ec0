package schedule

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A fenced device's pods are force-deleted at once, whatever they
// tolerate, and replaced elsewhere in the same pass; it gets no new pod,
// not even a DaemonSet's.
func TestFencedDevicePodsForceDeletedAndReplaced(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "100m", "")
	agent := daemonSet("agent", kv("app=agent"), "10m", "")
	in := Input{Now: t0, Devices: []Device{device("a"), device("b"), device("c")},
		Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	in = apply(in, Schedule(in), t0)
	var fenced string
	for _, p := range in.Pods {
		if strings.HasPrefix(p.Name, "web-") {
			fenced = p.Spec.NodeName
			break
		}
	}
	// A bare pod that tolerates everything and a pod already terminating
	// gracefully on the device go too.
	bare := pod("bare", fenced, nil, "", "")
	bare.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	slow := pod("slow", fenced, nil, "", "")
	ts := metav1.NewTime(t0)
	slow.DeletionTimestamp = &ts
	in.Pods = append(in.Pods, bare, slow)
	on := append(podsOn(in, fenced), "slow")
	for i := range in.Devices {
		if in.Devices[i].Name == fenced {
			in.Devices[i].Fenced = true
		}
	}
	in.Now = t0.Add(time.Second)
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
		if strings.HasPrefix(p.Name, "agent-") {
			t.Errorf("a DaemonSet pod %s was made for a fenced device", p.Name)
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
	// A bare pod pinned there by nodeName waits, it is not placed.
	pinned := pod("pinned", "", nil, "", "")
	pinned.Spec.NodeSelector = map[string]string{v1.LabelHostname: fenced}
	plan = Schedule(Input{Now: in.Now, Devices: in.Devices, Pods: []*v1.Pod{pinned}})
	if _, ok := pendingOf(plan, "pinned"); !ok {
		t.Fatalf("a pod selecting only the fenced device was not left pending: bindings %v", plan.Bindings)
	}
}
