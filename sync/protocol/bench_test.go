package protocol

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
)

// BenchmarkOpenDesired is a device receiving the hub's document for 10
// pods: envelope decode, signature check, then every pod decoded and
// validated as a manifest file's.
func BenchmarkOpenDesired(b *testing.B) {
	pub, priv := keys(b)
	var pods []string
	for i := range 10 {
		pods = append(pods, fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-%d","labels":{"app":"web"}},"spec":{"runtimeClassName":"process","containers":[{"name":"app","image":"host","command":["sleep","1000"],"env":[{"name":"MODE","value":"device"}],"resources":{"limits":{"memory":"64Mi","cpu":"250m"}},"readinessProbe":{"httpGet":{"path":"/ready","port":8080}}}]}}`, i))
	}
	data, err := Sign(desired(7, pods...), priv)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		d, err := OpenDesired(data, "gw-1", pub, false)
		if err != nil {
			b.Fatal(err)
		}
		if got, _ := DecodePods(d, manifest.Decode); len(got) != len(pods) {
			b.Fatalf("decoded %d pods of %d", len(got), len(pods))
		}
	}
}

// BenchmarkEncodeStatusBatch is a device's status upload: the mirrors of
// 10 running pods with their container statuses, as JSON.
func BenchmarkEncodeStatusBatch(b *testing.B) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	batch := &StatusBatch{Device: "gw-1", Epoch: "e1"}
	for i := range 10 {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default", UID: "uid",
				Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"podvisor.io/source": "hub"}},
			Spec: v1.PodSpec{RuntimeClassName: new("process"), Containers: []v1.Container{{Name: "app", Image: "host", Command: []string{"sleep", "1000"}}}},
			Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &now, PodIP: "10.0.0.2",
				Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now},
					{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: now}},
				ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 2, Image: "host", ContainerID: "process://uid_app_3",
					State:                v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
					LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: now}}}}},
		}
		batch.Items = append(batch.Items, StatusItem{Seq: int64(i + 1), Key: "default/" + p.Name, Pod: p})
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(Encode(batch)) == 0 {
			b.Fatal("empty batch")
		}
	}
}
