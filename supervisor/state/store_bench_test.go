package state

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// benchInstances is a device's worth of pods, each with two containers
// that have restarted, as the daemon saves them after a sync.
func benchInstances(n int) []*lifecycle.Instance {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]*lifecycle.Instance, n)
	for i := range out {
		uid := types.UID(fmt.Sprintf("uid-%03d", i))
		in := &lifecycle.Instance{
			Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: "default", UID: uid,
				Annotations: map[string]string{"podvisor.io/source": "file"}},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "host"}, {Name: "side", Image: "host"}}}},
			Created: now,
		}
		for _, name := range []string{"app", "side"} {
			id := fmt.Sprintf("%s_%s_3", uid, name)
			in.Containers = append(in.Containers, &lifecycle.Container{Name: name, Phase: lifecycle.Running,
				Attempt: 3, RestartCount: 2, InstanceID: id, StartedAt: now,
				Last: &lifecycle.Termination{InstanceID: id, ExitCode: 1, Reason: "Error", FinishedAt: now}})
		}
		out[i] = in
	}
	return out
}

// BenchmarkSaveAndLoad is the store's hot path: a batch of 10 changed pods
// written in one transaction, then everything read back (start-up).
func BenchmarkSaveAndLoad(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pods := benchInstances(10)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for _, in := range pods {
			in.Containers[0].RestartCount = int32(i)
		}
		if err := s.Save(pods, nil); err != nil {
			b.Fatal(err)
		}
		if got, err := s.Instances(); err != nil || len(got) != len(pods) {
			b.Fatalf("instances = %d, %v", len(got), err)
		}
	}
}
