package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/api"
)

// fakeHub answers the drain's calls: hub pods on the device, evictions
// refused while refusals last, deletions.
type fakeHub struct {
	mu       sync.Mutex
	pods     []v1.Pod
	refuse   map[string]int // evictions to refuse per pod
	calls    []string
	cordoned bool
}

func (f *fakeHub) Do(method, path string, body, into any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method+" "+path)
	switch {
	case method == "PUT" && strings.HasSuffix(path, "/cordon"):
		f.cordoned = true
	case method == "GET" && strings.HasSuffix(path, "/hubpods"):
		raw, _ := json.Marshal(f.pods)
		return json.Unmarshal(raw, into)
	case method == "POST" && strings.HasSuffix(path, "/eviction"):
		name := strings.Split(path, "/")[4]
		if f.refuse[name] > 0 {
			f.refuse[name]--
			return &api.Error{Code: http.StatusTooManyRequests, Message: "Cannot evict pod as it would violate the pod's disruption budget.",
				Cause: "The disruption budget web needs 2 healthy pods and has 2 currently", Budget: "web"}
		}
		f.remove(name)
	case method == "DELETE":
		f.remove(strings.Split(path, "/")[4])
	}
	return nil
}

func (f *fakeHub) remove(name string) {
	for i, p := range f.pods {
		if p.Name == name {
			f.pods = append(f.pods[:i], f.pods[i+1:]...)
			return
		}
	}
}

func hubPod(name, ownerKind string) v1.Pod {
	p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("u-" + name)}}
	if ownerKind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "owner", Controller: &yes}}
	}
	return p
}

func newDrainer(f *fakeHub) (*drainer, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &drainer{api: f, out: &out, errOut: &errOut, device: "gw-1", retry: time.Millisecond, poll: time.Millisecond}, &out, &errOut
}

func TestDrainRetriesWhileTheBudgetRefuses(t *testing.T) {
	f := &fakeHub{pods: []v1.Pod{hubPod("web-a", "ReplicaSet"), hubPod("agent-x", "DaemonSet")}, refuse: map[string]int{"web-a": 2}}
	d, _, _ := newDrainer(f)
	if err := d.run(context.Background()); err == nil || err.Error() !=
		`unable to drain device "gw-1" due to error: cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/agent-x` {
		t.Fatalf("DaemonSet pod without --ignore-daemonsets: %v", err)
	}
	if !f.cordoned {
		t.Fatal("not cordoned first")
	}
	d, out, errOut := newDrainer(f)
	d.ignoreDaemonSets = true
	if err := d.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantErr := "Warning: ignoring DaemonSet-managed Pods: default/agent-x\n" +
		strings.Repeat(`error when evicting pods/"web-a" -n "default" (will retry after 1ms): Cannot evict pod as it would violate the pod's disruption budget.`+"\n"+
			"  The disruption budget web needs 2 healthy pods and has 2 currently\n", 2)
	if errOut.String() != wantErr {
		t.Fatalf("stderr:\n%s\nwant:\n%s", errOut, wantErr)
	}
	wantOut := "device/gw-1 cordoned\n" + strings.Repeat("evicting pod default/web-a\n", 3) + "pod/web-a evicted\ndevice/gw-1 drained\n"
	if out.String() != wantOut {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, wantOut)
	}
	if len(f.pods) != 1 || f.pods[0].Name != "agent-x" {
		t.Fatalf("pods left %v", f.pods)
	}
}

func TestDrainTimesOutAndDisableEvictionDeletes(t *testing.T) {
	f := &fakeHub{pods: []v1.Pod{hubPod("web-a", "ReplicaSet"), hubPod("solo", "")}, refuse: map[string]int{"web-a": 1 << 30}}
	withData := hubPod("cache", "ReplicaSet")
	withData.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	f.pods = append(f.pods, withData)
	d, _, _ := newDrainer(f)
	if err := d.run(context.Background()); err == nil || err.Error() != `unable to drain device "gw-1" due to error: [`+
		`cannot delete Pods with local storage (use --delete-emptydir-data to override): default/cache, `+
		`cannot delete Pods that declare no controller (use --force to override): default/solo]` {
		t.Fatalf("bare pod without --force, emptyDir without --delete-emptydir-data: %v", err)
	}
	f.pods = f.pods[:2]
	d, _, _ = newDrainer(f)
	d.force, d.timeout = true, 20*time.Millisecond
	err := d.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `error when evicting pods/"web-a" -n "default": global timeout reached: 20ms`) {
		t.Fatalf("timeout: %v", err)
	}
	d, out, _ := newDrainer(f)
	d.force, d.disableEviction = true, true
	f.calls = nil
	if err := d.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.calls {
		if strings.HasSuffix(c, "/eviction") {
			t.Fatalf("--disable-eviction evicted: %v", f.calls)
		}
	}
	if len(f.pods) != 0 || !strings.Contains(out.String(), "pod/web-a deleted\n") {
		t.Fatalf("pods %v, out %s", f.pods, out)
	}
}
