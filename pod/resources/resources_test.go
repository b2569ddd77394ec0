package resources

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestCPUFormulas(t *testing.T) {
	for _, c := range []struct {
		milli  int64
		shares uint64
		quota  int64
	}{
		{0, 2, 0}, {1, 2, 1000}, {10, 10, 1000}, {100, 102, 10000}, {1000, 1024, 100000},
		{1500, 1536, 150000}, {300000, 262144, 30000000},
	} {
		if got := CPUShares(c.milli); got != c.shares {
			t.Errorf("CPUShares(%dm) = %d, want %d", c.milli, got, c.shares)
		}
		if got := CPUQuota(c.milli); got != c.quota {
			t.Errorf("CPUQuota(%dm) = %d, want %d", c.milli, got, c.quota)
		}
	}
	for shares, weight := range map[uint64]uint64{2: 1, 1024: 100, 262144: 10000, 512: 59, 2048: 174} {
		if got := CPUWeight(shares); got != weight {
			t.Errorf("CPUWeight(%d) = %d, want %d", shares, got, weight)
		}
	}
	prev := uint64(0)
	for s := uint64(2); s <= MaxShares; s *= 2 {
		if w := CPUWeight(s); w <= prev && s > 2 {
			t.Fatalf("weight must grow with shares: %d -> %d", s, w)
		} else {
			prev = w
		}
	}
}

func container(name string, req, lim map[v1.ResourceName]string) v1.Container {
	c := v1.Container{Name: name}
	list := func(m map[v1.ResourceName]string) v1.ResourceList {
		if m == nil {
			return nil
		}
		l := v1.ResourceList{}
		for k, v := range m {
			l[k] = resource.MustParse(v)
		}
		return l
	}
	c.Resources.Requests, c.Resources.Limits = list(req), list(lim)
	return c
}

func TestOOMScoreAdj(t *testing.T) {
	capacity := int64(1 << 30)
	guaranteed := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		container("a", map[v1.ResourceName]string{"cpu": "1", "memory": "100Mi"}, map[v1.ResourceName]string{"cpu": "1", "memory": "100Mi"})}}}
	best := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{container("a", nil, nil)}}}
	burst := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		container("a", map[v1.ResourceName]string{"memory": "256Mi"}, nil),
		container("b", map[v1.ResourceName]string{"memory": "1Gi"}, nil),
		container("c", map[v1.ResourceName]string{"cpu": "10m"}, nil)}}}
	always := v1.ContainerRestartPolicyAlways
	side := container("side", map[v1.ResourceName]string{"memory": "1Mi"}, nil)
	side.RestartPolicy = &always
	burst.Spec.InitContainers = []v1.Container{side}
	cases := []struct {
		pod  *v1.Pod
		c    *v1.Container
		want int
	}{
		{guaranteed, &guaranteed.Spec.Containers[0], -997},
		{best, &best.Spec.Containers[0], 1000},
		{burst, &burst.Spec.Containers[0], 750},   // 1000 - 1000*256Mi/1Gi
		{burst, &burst.Spec.Containers[1], 3},     // clamped low
		{burst, &burst.Spec.Containers[2], 999},   // clamped high
		{burst, &burst.Spec.InitContainers[0], 3}, // a sidecar scores no higher than the lowest app container
	}
	for i, c := range cases {
		if got := OOMScoreAdj(c.pod, c.c, capacity); got != c.want {
			t.Errorf("case %d (%s): %d, want %d", i, c.c.Name, got, c.want)
		}
	}
	crit := int32(SystemNodeCritical)
	best.Spec.Priority = &crit
	if got := OOMScoreAdj(best, &best.Spec.Containers[0], capacity); got != -997 {
		t.Errorf("system-node-critical BestEffort: %d, want -997", got)
	}
}

func TestPodRequestsWithInitAndSidecars(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	side := container("side", map[v1.ResourceName]string{"memory": "100Mi", "cpu": "100m"}, nil)
	side.RestartPolicy = &always
	p := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{
			container("big-init", map[v1.ResourceName]string{"memory": "1Gi"}, nil),
			side,
			container("late-init", map[v1.ResourceName]string{"cpu": "2"}, nil),
		},
		Containers: []v1.Container{container("app", map[v1.ResourceName]string{"memory": "200Mi", "cpu": "500m"}, nil)},
		Overhead:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("10Mi")},
	}}
	got := PodRequests(p)
	// memory: max(app 200Mi + sidecar 100Mi, big-init 1Gi) + 10Mi overhead
	if m := got.Memory(); m.Cmp(resource.MustParse("1034Mi")) != 0 {
		t.Errorf("memory = %s, want 1034Mi", m)
	}
	// cpu: max(500m + 100m, late-init 2 + sidecar 100m started before it)
	if c := got.Cpu(); c.Cmp(resource.MustParse("2100m")) != 0 {
		t.Errorf("cpu = %s, want 2100m", c)
	}
}

func TestPodLimitsByQoS(t *testing.T) {
	g := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		container("a", nil, map[v1.ResourceName]string{"cpu": "500m", "memory": "64Mi"}),
		container("b", nil, map[v1.ResourceName]string{"cpu": "250m", "memory": "32Mi"})}}}
	// Requests default to limits in the API server; do it here too.
	for i := range g.Spec.Containers {
		g.Spec.Containers[i].Resources.Requests = g.Spec.Containers[i].Resources.Limits.DeepCopy()
	}
	l := PodLimits(g, 1024)
	if l.CPUShares != 768 || l.CPUQuota != 75000 || l.MemoryMax != 96<<20 || l.PidsMax != 1024 {
		t.Fatalf("guaranteed pod limits = %+v", l)
	}
	b := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		container("a", map[v1.ResourceName]string{"cpu": "100m"}, map[v1.ResourceName]string{"memory": "64Mi"}),
		container("b", map[v1.ResourceName]string{"cpu": "100m"}, nil)}}}
	if l := PodLimits(b, 0); l.MemoryMax != 0 || l.CPUQuota != 0 || l.CPUShares != 204 {
		t.Fatalf("burstable pod with a container lacking limits = %+v", l)
	}
	be := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{container("a", nil, nil)}}}
	if l := PodLimits(be, 0); l.CPUShares != 2 || l.MemoryMax != 0 {
		t.Fatalf("besteffort = %+v", l)
	}
	cl := ContainerLimits(&g.Spec.Containers[0])
	if cl.CPUShares != 512 || cl.CPUQuota != 50000 || cl.MemoryMax != 64<<20 || cl.MemoryLow != 64<<20 {
		t.Fatalf("container limits = %+v", cl)
	}
}
