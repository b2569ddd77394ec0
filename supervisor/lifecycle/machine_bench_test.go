package lifecycle

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkExitRestartStep is the core's step for one crash on a device
// with 10 pods: the exit, the reconcile that restarts it once its backoff
// passed, the start acknowledged, every pod's status view and the records
// handed to the store.
func BenchmarkExitRestartStep(b *testing.B) {
	m := NewMachine(DefaultConfig())
	now := t0
	var pods []*v1.Pod
	for i := range 10 {
		pods = append(pods, pod(fmt.Sprintf("web-%d", i), fmt.Sprintf("uid-%d", i), v1.RestartPolicyAlways, "app", "side"))
	}
	m.SetDesired(pods)
	reconcile := func() Ready {
		rd := m.Ready(now)
		m.Advance(rd)
		for _, a := range rd.Actions {
			if a.Kind == Start {
				m.Started(a.Pod, a.Container, a.InstanceID, now)
			}
		}
		return rd
	}
	reconcile()
	m.Advance(m.Flush())
	uid := types.UID("uid-3")
	b.ReportAllocs()
	for b.Loop() {
		c := m.Instance(uid).Container("app")
		if c.Phase != Running {
			b.Fatalf("container is %v, not running", c.Phase)
		}
		now = now.Add(time.Second)
		m.Exited(uid, "app", Termination{InstanceID: c.InstanceID, ExitCode: 1, Reason: "Error", FinishedAt: now})
		now = now.Add(6 * time.Minute) // past the longest backoff
		rd := reconcile()
		for _, in := range m.Instances() {
			m.PodView(in, now)
		}
		if len(rd.Records) == 0 {
			b.Fatal("the restart changed no instance")
		}
	}
}
