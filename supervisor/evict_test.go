package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// An eviction records on its victim what woke the look that chose it,
// with the time of the daemon's clock: the kernel's threshold event is
// told apart from the safety net without timing either.
func TestEvictionRecordsWhatWokeIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pokes  []pressure.Wake
		want   string
		kernel bool
	}{
		{"threshold event", []pressure.Wake{pressure.WakeThreshold}, "woken by the memory threshold event", true},
		{"safety net", []pressure.Wake{pressure.WakePeriodic}, "woken by the periodic check", false},
		// Both came before the daemon looked: both are named.
		{"both", []pressure.Wake{pressure.WakePeriodic, pressure.WakeThreshold}, "woken by the memory threshold event and periodic check", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := shellDaemon(t, ctx, newFakeRuntime())
			clock := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
			d.now = func() time.Time { return clock }
			available := int64(900)
			notifier := pressure.NewNotifier(d.log)
			d.protector = shellProtector(t, d, nodeprotect.Options{
				Eviction: nodeprotect.EvictionConfig{Hard: map[string]string{"memory.available": "100"}},
				Observer: observerFunc(func() map[eviction.Signal]eviction.Observation {
					return map[eviction.Signal]eviction.Observation{eviction.MemoryAvailable: {Available: available, Capacity: 1000}}
				}),
				Notifier: notifier,
			})
			st := desireWebPod(t, d, `  - {name: app, image: host}`)
			uid := st.Pods[0].UID
			runUntil(t, d, "the container runs", func() bool {
				in := d.machine.Instance(uid)
				return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
			})

			clock = clock.Add(time.Minute)
			available = 50 // below the threshold from now on
			for _, w := range tc.pokes {
				notifier.Poke(w)
			}
			runUntil(t, d, "the pod is evicted", func() bool {
				in := d.machine.Instance(uid)
				return in != nil && in.Failed != nil && !in.Live()
			})

			var met, evicted *api.Event
			evs := d.API().Events("default", "web")
			for i := range evs {
				switch evs[i].Reason {
				case nodeprotect.ReasonThresholdMet:
					met = &evs[i]
				case "Evicted":
					evicted = &evs[i]
				}
			}
			if met == nil || evicted == nil {
				t.Fatalf("events %+v: want %s then Evicted", evs, nodeprotect.ReasonThresholdMet)
			}
			if !strings.Contains(met.Message, tc.want) || !strings.Contains(met.Message, "hard memory.available<100") {
				t.Errorf("%s message %q, want the threshold and %q", nodeprotect.ReasonThresholdMet, met.Message, tc.want)
			}
			if !met.FirstTime.Equal(clock) || met.Type != "Warning" {
				t.Errorf("%s at %v (%s), want a Warning at the daemon's clock %v", nodeprotect.ReasonThresholdMet, met.FirstTime, met.Type, clock)
			}
			if strings.Contains(evicted.Message, "woken") {
				t.Errorf("the Evicted message %q carries the cause: it is the pod's status message, kept as the kubelet's", evicted.Message)
			}
			pods, _, _ := d.API().Pods()
			if pods[0].Status.Reason != "Evicted" || strings.Contains(pods[0].Status.Message, "woken") {
				t.Errorf("pod status %q %q", pods[0].Status.Reason, pods[0].Status.Message)
			}
		})
	}
}

// observerFunc observes the signals by calling itself.
type observerFunc func() map[eviction.Signal]eviction.Observation

func (f observerFunc) Observe() map[eviction.Signal]eviction.Observation { return f() }
