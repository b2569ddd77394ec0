package nodeprotect

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

var hardMemory100 = EvictionConfig{Hard: map[string]string{"memory.available": "100"}}

// A wake whose causes an earlier look already took looks no more: the
// earlier look saw what the kernel had to say.
func TestWakeWithoutCauseDoesNotLook(t *testing.T) {
	notifier := pressure.NewNotifier(nil)
	p, _, obs := protector(t, Options{Notifier: notifier})
	notifier.Poke(pressure.WakePSI)
	<-p.Woken()
	p.Wake(context.Background(), fakePods{})
	// A poke whose bit the look above took, but whose send came after.
	notifier.C <- struct{}{}
	<-p.Woken()
	p.Wake(context.Background(), fakePods{})
	if obs.looks != 1 {
		t.Fatalf("%d looks, want 1", obs.looks)
	}
}

// An eviction names what woke the look that chose it, at the
// protector's clock; the pod's own message stays the kubelet's.
func TestEvictionCarriesWhatWokeIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pokes []pressure.Wake
		want  string
	}{
		{"threshold event", []pressure.Wake{pressure.WakeThreshold}, "woken by the memory threshold event"},
		{"safety net", []pressure.Wake{pressure.WakePeriodic}, "woken by the periodic check"},
		{"both", []pressure.Wake{pressure.WakePeriodic, pressure.WakeThreshold}, "woken by the memory threshold event and periodic check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notifier := pressure.NewNotifier(nil)
			p, clock, obs := protector(t, Options{Eviction: hardMemory100, Notifier: notifier})
			pods := fakePods{}
			pods.add("web", 0)
			clock.at = clock.at.Add(time.Minute)
			obs.signals = memoryAvailable(50)
			for _, w := range tc.pokes {
				notifier.Poke(w)
			}
			<-p.Woken()
			e := p.Wake(context.Background(), pods).Evict
			if e == nil || e.Pod != "web" {
				t.Fatalf("eviction %+v, want web evicted", e)
			}
			want := "eviction threshold met (hard memory.available<100); " + tc.want
			if e.Event != want {
				t.Errorf("event %q, want %q", e.Event, want)
			}
			if !e.At.Equal(clock.at) || e.GracePeriod != eviction.HardGracePeriod {
				t.Errorf("evicted at %v with grace %v, want the clock's %v and the hard grace %v", e.At, e.GracePeriod, clock.at, eviction.HardGracePeriod)
			}
			if !strings.HasPrefix(e.Message, "The node was low on resource: memory.") || strings.Contains(e.Message, "woken") {
				t.Errorf("pod message %q, want the kubelet's alone", e.Message)
			}
		})
	}
}

// One victim at a time: the next is chosen once the last one's processes
// are gone, lowest priority first.
func TestEvictionWaitsForTheLastVictim(t *testing.T) {
	p, _, obs := protector(t, Options{Eviction: hardMemory100})
	pods := fakePods{}
	pods.add("low", 0)
	pods.add("high", 1000)
	obs.signals = memoryAvailable(50)
	ctx := context.Background()
	if e := p.Look(ctx, pressure.WakePSI, pods).Evict; e == nil || e.Pod != "low" {
		t.Fatalf("first eviction %+v, want the lowest priority", e)
	}
	if d := p.Look(ctx, pressure.WakeRecheck, pods); d.Evict != nil || d.Reclaim {
		t.Fatalf("%+v while the last victim still runs, want nothing", d)
	}
	pods.end("low")
	if e := p.Look(ctx, pressure.WakeRecheck, pods).Evict; e == nil || e.Pod != "high" {
		t.Fatalf("eviction %+v once low is gone, want high", e)
	}
}

// Disk pressure reclaims on the node first, once per spell of pressure;
// pods are evicted only if it lasts.
func TestDiskPressureReclaimsFirst(t *testing.T) {
	p, _, obs := protector(t, Options{Eviction: EvictionConfig{Hard: map[string]string{"nodefs.available": "100"}}})
	pods := fakePods{}
	pods.add("web", 0)
	obs.signals = map[eviction.Signal]eviction.Observation{eviction.NodeFsAvailable: {Available: 50, Capacity: 1000}}
	ctx := context.Background()
	if d := p.Look(ctx, pressure.WakePeriodic, pods); !d.Reclaim || d.Evict != nil {
		t.Fatalf("first look %+v, want reclaim alone", d)
	}
	if e := p.Look(ctx, pressure.WakeRecheck, pods).Evict; e == nil || e.Pod != "web" {
		t.Fatalf("eviction %+v after reclaim, want web", e)
	}
}

// The conditions a look finds are the node's, and admission's.
func TestLookSetsTheNodeConditions(t *testing.T) {
	p, _, obs := protector(t, Options{Eviction: hardMemory100})
	condition := func(typ v1.NodeConditionType) v1.NodeCondition {
		for _, c := range p.NodeView(nil).Status.Conditions {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s condition", typ)
		return v1.NodeCondition{}
	}
	if c := condition(v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Fatalf("before any pressure: %s %s", c.Status, c.Reason)
	}
	obs.signals = memoryAvailable(50)
	p.Look(context.Background(), pressure.WakePSI, fakePods{})
	if c := condition(v1.NodeMemoryPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" {
		t.Fatalf("under memory pressure: %s %s", c.Status, c.Reason)
	}
	bestEffort := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	if a := p.Admitter()(bestEffort, nil); a.Admit {
		t.Errorf("a best-effort pod admitted under memory pressure")
	}
}
