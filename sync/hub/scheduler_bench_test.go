package hub_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// One pass of podhub's wiring over 10,000 devices in 10 zones with a
// 10,000-pod DaemonSet and a 1,000-replica zone-spread Deployment: the
// plan stored and 10,000 desired documents signed; then a steady pass.
// go test -run '^$' -bench SchedulePassFleet10k -benchtime 1x ./sync/hub/
func BenchmarkSchedulePassFleet10k(b *testing.B) {
	for range b.N {
		b.StopTimer()
		r := newSchedRig(b, nil)
		for i := range 10000 {
			id := fmt.Sprintf("dev-%05d", i)
			if err := r.fleet.SetLabels(id, map[string]string{"zone": fmt.Sprintf("z%d", i%10)}); err != nil {
				b.Fatal(err)
			}
			r.heartbeat(id)
		}
		const container = `containers: [{name: c, image: "process:///bin/sleep", args: ["1000"], resources: {requests: {cpu: 10m}}}]`
		r.apply(workloadfile.File(workloadfile.DaemonSet("agent", container),
			workloadfile.Deployment("bridge", 1000, workloadfile.Spread("zone", "bridge"), container)))
		b.StartTimer()
		start := time.Now()
		r.pass()
		first := time.Since(start)
		start = time.Now()
		r.pass()
		steady := time.Since(start)
		b.StopTimer()
		live, _ := r.placed()
		if len(live["agent"]) != 10000 || len(live["bridge"]) != 1000 {
			b.Fatalf("placed %d agent, %d bridge pods", len(live["agent"]), len(live["bridge"]))
		}
		d, _ := r.fleet.Desired("dev-00000")
		if d.Generation != 1 {
			b.Fatalf("dev-00000 at generation %d after two passes, want 1", d.Generation)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(first.Seconds(), "s/first-pass")
		b.ReportMetric(steady.Seconds(), "s/steady-pass")
		b.ReportMetric(float64(ms.HeapInuse>>20), "MiB-heap")
		_ = protocol.MaxDesiredBytes
	}
}
