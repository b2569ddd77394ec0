package nodeprotect

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

func stopped(stops []Stop) []types.UID {
	var out []types.UID
	for _, s := range stops {
		out = append(out, s.Pod)
	}
	return out
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// A drain stops its buckets lowest priority first, each once the last is
// gone or out of time, with the kubelet's reason and message, and admits
// nothing until Uncordon.
func TestDrainStopsBucketByBucket(t *testing.T) {
	buckets := []ShutdownBucket{{Priority: 1000, GracePeriod: 5 * time.Second}, {Priority: 0, GracePeriod: 20 * time.Second}}
	p, clock, _ := protector(t, Options{ShutdownBuckets: buckets, Memory: 1000, Node: NodeConfig{MaxPods: 10}})
	pods := fakePods{}
	pods.add("low", 0)
	pods.add("lower", -5)
	pods.add("high", 1000)
	pods.add("critical", 2000001000)

	done, stops := p.Drain("maintenance", pods)
	if got := stopped(stops); !slices.Equal(got, []types.UID{"low", "lower"}) {
		t.Fatalf("first bucket stops %v, want the pods below 1000", got)
	}
	want := Stop{Pod: "low", Reason: lifecycle.ReasonNodeShutdown, GracePeriod: 20 * time.Second, At: clock.at,
		Message: "Pod was terminated in response to imminent node shutdown. (maintenance)"}
	if stops[0] != want {
		t.Errorf("stop %+v, want %+v", stops[0], want)
	}
	if !p.Draining() || p.DrainTimer() == nil {
		t.Fatal("no drain under way")
	}
	if a := p.Admitter()(&v1.Pod{}, nil); a.Admit || a.Reason != "NodeShutdown" {
		t.Errorf("admission while draining: %+v", a)
	}
	if again, stops := p.Drain("again", pods); again != done || stops != nil {
		t.Error("a second drain did not join the first")
	}

	if got := p.AdvanceDrain(pods); got != nil {
		t.Fatalf("%v stopped while the first bucket runs, within its time", stopped(got))
	}
	pods.end("low")
	clock.at = clock.at.Add(19 * time.Second)
	if got := p.AdvanceDrain(pods); got != nil {
		t.Fatalf("%v stopped while a pod of the first bucket runs, within its time", stopped(got))
	}
	clock.at = clock.at.Add(time.Second) // the first bucket's time is up
	stops = p.AdvanceDrain(pods)
	if got := stopped(stops); !slices.Equal(got, []types.UID{"critical", "high"}) || stops[0].GracePeriod != 5*time.Second {
		t.Fatalf("second bucket stops %v (%+v), want the rest with 5s", got, stops)
	}
	if err := p.Uncordon(func() int { return 0 }); err == nil {
		t.Error("uncordoned while the drain is in progress")
	}

	pods.end("lower", "high", "critical")
	if got := p.AdvanceDrain(pods); got != nil || !isDone(done) {
		t.Fatalf("every pod gone: stops %v, done %v", stopped(got), isDone(done))
	}
	revived := false
	if err := p.Uncordon(func() int { revived = true; return 4 }); err != nil || !revived {
		t.Fatalf("uncordon after the drain: %v (revived: %v)", err, revived)
	}
	if p.Draining() || p.DrainTimer() != nil {
		t.Error("still draining after Uncordon")
	}
	if a := p.Admitter()(&v1.Pod{}, nil); !a.Admit {
		t.Errorf("admission after Uncordon: %+v", a)
	}
}

// Uncordon without a drain is for pods a drain stopped before a restart:
// without any, the node is not draining.
func TestUncordonWithoutADrain(t *testing.T) {
	p, _, _ := protector(t, Options{})
	if err := p.Uncordon(func() int { return 0 }); err == nil || err.Error() != "the node is not draining" {
		t.Errorf("uncordon of nothing: %v", err)
	}
	if err := p.Uncordon(func() int { return 1 }); err != nil {
		t.Errorf("uncordon reviving a pod a forgotten drain stopped: %v", err)
	}
}

// A drain with nothing to stop is done at once.
func TestDrainOfAnEmptyNode(t *testing.T) {
	p, _, _ := protector(t, Options{})
	done, stops := p.Drain("SIGPWR", fakePods{})
	if stops != nil || !isDone(done) {
		t.Fatalf("stops %v, done %v: want none and done", stops, isDone(done))
	}
}
