package objectlink

import (
	"fmt"
	"testing"

	"github.com/podvisor/podvisor/pod/objects"
)

// BenchmarkSharedConfigMapChange is one ConfigMap, used by a pod on each
// of 1,000 devices, changed: every device's index computed, signed,
// stored and published.
func BenchmarkSharedConfigMapChange(b *testing.B) {
	r := newLinkRig(b, DefaultLimits)
	const devices = 1000
	r.src.put(objects.ConfigMap, "default", "app", "0", 100)
	for i := range devices {
		id := fmt.Sprintf("gw-%04d", i)
		if err := r.fleet.AddDevice(id); err != nil {
			b.Fatal(err)
		}
		r.pods(id, volumePod("web", "app"))
	}
	r.flushB(b)
	r.out.take()
	b.ResetTimer()
	for i := range b.N {
		r.src.put(objects.ConfigMap, "default", "app", fmt.Sprint(i+1), 100)
		r.link.ObjectChanged(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
		r.flushB(b)
		if n := len(r.out.take()); n != devices {
			b.Fatalf("%d published", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/change")
}

func (r *linkRig) flushB(b *testing.B) {
	r.link.mu.Lock()
	dirty := r.link.dirty
	r.link.dirty = map[string]bool{}
	r.link.mu.Unlock()
	if r.link.pass(dirty) {
		b.Fatal("a pass failed")
	}
}
