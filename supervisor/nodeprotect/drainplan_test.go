package nodeprotect

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestDrainPlan(t *testing.T) {
	configured := []ShutdownBucket{{Priority: 1000, GracePeriod: time.Second}, {Priority: -5, GracePeriod: 3 * time.Second}, {Priority: 0, GracePeriod: 2 * time.Second}}
	want := []ShutdownBucket{configured[1], configured[2], configured[0]}
	if got := drainPlan(configured); !slices.Equal(got, want) {
		t.Errorf("drainPlan = %v, want lowest priority first %v", got, want)
	}
	if configured[0].Priority != 1000 {
		t.Error("drainPlan sorted the configuration in place")
	}
}

func TestBucketPods(t *testing.T) {
	plan := []ShutdownBucket{{Priority: 0}, {Priority: 1000}, {Priority: 2000000000}}
	pods := []drainCandidate{
		{UID: "negative", Priority: -10, Stoppable: true},
		{UID: "zero", Priority: 0, Stoppable: true},
		{UID: "high", Priority: 999, Stoppable: true},
		{UID: "thousand", Priority: 1000, Stoppable: true},
		{UID: "critical", Priority: 2000001000, Stoppable: true},
		{UID: "terminating", Priority: 0, Stoppable: false},
		{UID: "max", Priority: 1<<31 - 1, Stoppable: true},
	}
	for _, tc := range []struct {
		plan   []ShutdownBucket
		bucket int
		want   []types.UID
	}{
		{plan, 0, []types.UID{"negative", "zero", "high"}}, // the first bucket takes what lies below it
		{plan, 1, []types.UID{"thousand"}},
		{plan, 2, []types.UID{"critical"}}, // the last one has no upper bound but the largest int32, exclusive
		{plan[:1], 0, []types.UID{"negative", "zero", "high", "thousand", "critical"}},
		{[]ShutdownBucket{{Priority: 500}, {Priority: 1500}}, 0, []types.UID{"negative", "zero", "high", "thousand"}},
	} {
		if got := bucketPods(pods, tc.plan, tc.bucket); !slices.Equal(got, tc.want) {
			t.Errorf("bucket %d of %v: %v, want %v", tc.bucket, tc.plan, got, tc.want)
		}
	}
}
