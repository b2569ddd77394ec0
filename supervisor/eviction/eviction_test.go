package eviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const mi = 1 << 20

func TestParse(t *testing.T) {
	ts, err := Parse(DefaultHard(), map[string]string{"memory.available": "300Mi"}, map[string]string{"memory.available": "30s"},
		map[string]string{"memory.available": "50Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 5 {
		t.Fatalf("thresholds = %v", ts)
	}
	for _, bad := range []struct {
		hard, soft, grace map[string]string
		want              string
	}{
		{map[string]string{"memory.free": "1Mi"}, nil, nil, "unknown signal"},
		{map[string]string{"memory.available": "ten"}, nil, nil, "memory.available"},
		{map[string]string{"nodefs.available": "120%"}, nil, nil, "percentage"},
		{nil, map[string]string{"memory.available": "1Gi"}, nil, "needs a grace period"},
		{nil, nil, map[string]string{"memory.available": "1m"}, "no soft threshold"},
	} {
		if _, err := Parse(bad.hard, bad.soft, bad.grace, nil); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v %v %v: err %v, want %q", bad.hard, bad.soft, bad.grace, err, bad.want)
		}
	}
}

func manager(t *testing.T) *Manager {
	ts, err := Parse(map[string]string{"memory.available": "100Mi", "pid.available": "10%"},
		map[string]string{"memory.available": "300Mi"}, map[string]string{"memory.available": "20s"},
		map[string]string{"memory.available": "50Mi"})
	if err != nil {
		t.Fatal(err)
	}
	return &Manager{Thresholds: ts, TransitionPeriod: 5 * time.Minute, MaxPodGracePeriod: 10 * time.Second}
}

func mem(avail int64) map[Signal]Observation {
	return map[Signal]Observation{MemoryAvailable: {Available: avail, Capacity: 1024 * mi}}
}

func TestHardThresholdAndMinimumReclaim(t *testing.T) {
	m := manager(t)
	st := m.Synchronize(mem(99*mi), t0)
	if len(st.Met) != 1 || st.Met[0].Soft || !st.Conditions[v1.NodeMemoryPressure] {
		t.Fatalf("hard threshold: %+v", st)
	}
	// 120Mi is above 100Mi but below 100Mi + 50Mi minimum reclaim.
	if st := m.Synchronize(mem(120*mi), t0.Add(time.Second)); len(st.Met) != 1 {
		t.Fatalf("must keep reclaiming to the minimum: %+v", st.Met)
	}
	if st := m.Synchronize(mem(151*mi), t0.Add(2*time.Second)); len(st.Met) != 0 {
		t.Fatalf("reclaimed past the minimum: %+v", st.Met)
	}
}

func TestSoftThresholdGraceAndTransition(t *testing.T) {
	m := manager(t)
	st := m.Synchronize(mem(200*mi), t0)
	if len(st.Met) != 0 || !st.Conditions[v1.NodeMemoryPressure] || !st.NextCheck.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("soft threshold inside its grace: pressure reported, nothing to evict yet, wake at grace end: %+v", st)
	}
	if st := m.Synchronize(mem(200*mi), t0.Add(20*time.Second)); len(st.Met) != 1 || !st.Met[0].Soft {
		t.Fatalf("after the grace: %+v", st)
	}
	if st := m.Synchronize(mem(800*mi), t0.Add(30*time.Second)); !st.Conditions[v1.NodeMemoryPressure] || len(st.Met) != 0 {
		t.Fatalf("the condition holds for the transition period: %+v", st)
	}
	if st := m.Synchronize(mem(800*mi), t0.Add(20*time.Second+5*time.Minute+time.Second)); st.Conditions[v1.NodeMemoryPressure] {
		t.Fatalf("the condition clears after the transition period: %+v", st)
	}
	// A dip that ends inside the grace never evicts.
	m.Synchronize(mem(200*mi), t0.Add(time.Hour))
	m.Synchronize(mem(800*mi), t0.Add(time.Hour+5*time.Second))
	if st := m.Synchronize(mem(200*mi), t0.Add(time.Hour+10*time.Second)); len(st.Met) != 0 {
		t.Fatalf("the grace restarts after recovery: %+v", st.Met)
	}
}

func TestRankMemory(t *testing.T) {
	pods := []PodStats{
		{Name: "guaranteed-at-limit", Priority: 0, MemoryUsage: 500 * mi, MemoryReq: 500 * mi},
		{Name: "besteffort-hog", Priority: 0, MemoryUsage: 300 * mi},
		{Name: "burstable-over", Priority: 0, MemoryUsage: 200 * mi, MemoryReq: 100 * mi},
		{Name: "important-hog", Priority: 1000, MemoryUsage: 900 * mi},
	}
	var got []string
	for _, p := range Rank(MemoryAvailable, pods) {
		got = append(got, p.Name)
	}
	want := "besteffort-hog,burstable-over,important-hog,guaranteed-at-limit"
	if strings.Join(got, ",") != want {
		t.Fatalf("rank = %v, want %s", got, want)
	}
}

func TestRankPIDs(t *testing.T) {
	pods := []PodStats{{Name: "few", Processes: 3}, {Name: "many", Processes: 300}, {Name: "vip", Priority: 10, Processes: 900}}
	if r := Rank(PIDAvailable, pods); r[0].Name != "many" || r[2].Name != "vip" {
		t.Fatalf("rank = %+v", r)
	}
}

func TestSelectGraceAndCritical(t *testing.T) {
	m := manager(t)
	pods := []PodStats{
		{Name: "critical-hog", Critical: true, MemoryUsage: 900 * mi, GracePeriod: 30 * time.Second},
		{Name: "hog", MemoryUsage: 300 * mi, GracePeriod: 30 * time.Second},
	}
	hard := m.Synchronize(mem(50*mi), t0).Met
	v, _ := m.Select(hard, pods, false)
	if v == nil || v.Pod.Name != "hog" || v.GracePeriod != time.Second || !strings.Contains(v.Message, "memory") {
		t.Fatalf("hard: %+v", v)
	}
	soft := []Threshold{{Signal: MemoryAvailable, Soft: true, Quantity: 300 * mi}}
	if v, _ := m.Select(soft, pods, false); v == nil || v.GracePeriod != 10*time.Second {
		t.Fatalf("soft: min(evictionMaxPodGracePeriod, pod grace): %+v", v)
	}
	if v, _ := m.Select(hard, pods[:1], false); v != nil {
		t.Fatalf("a critical pod was chosen: %+v", v)
	}
	disk := []Threshold{{Signal: NodeFsAvailable, Percentage: 0.1}}
	if v, reclaim := m.Select(disk, pods, false); v != nil || !reclaim {
		t.Fatalf("disk pressure reclaims node-level resources first: %+v %v", v, reclaim)
	}
}

func TestImageGCBytes(t *testing.T) {
	gi := int64(1 << 30)
	for _, tc := range []struct {
		avail, capacity int64
		high, low       int
		want            int64
	}{
		{20 * gi, 100 * gi, 85, 80, 0},       // 80% used: below high
		{15 * gi, 100 * gi, 85, 80, 0},       // exactly at high
		{10 * gi, 100 * gi, 85, 80, 10 * gi}, // 90% used: down to 80%
		{0, 100 * gi, 85, 80, 20 * gi},
		{10 * gi, 100 * gi, 0, 0, 0}, // disabled
		{10 * gi, 0, 85, 80, 0},      // no observation
	} {
		if got := ImageGCBytes(Observation{Available: tc.avail, Capacity: tc.capacity}, tc.high, tc.low); got != tc.want {
			t.Errorf("%d/%d free, %d/%d%%: got %d, want %d", tc.avail, tc.capacity, tc.high, tc.low, got, tc.want)
		}
	}
}
