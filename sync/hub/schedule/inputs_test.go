package schedule

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Schedule changes none of the pods it is given: the hub keeps them
// decoded from one pass to the next (sync/hub's schedCache) and copies
// only those the plan changes.
func TestScheduleLeavesItsInputPodsAlone(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewSource(seed))
		in := randomFleet(r)
		for pass := range 3 {
			before := make([]*v1.Pod, len(in.Pods))
			for i, p := range in.Pods {
				before[i] = p.DeepCopy()
			}
			plan := Schedule(in)
			for i, p := range in.Pods {
				if !equality.Semantic.DeepEqual(p, before[i]) {
					t.Fatalf("%s: Schedule changed its input pod %s/%s", fmt.Sprintf("seed %d pass %d", seed, pass), p.Namespace, p.Name)
				}
			}
			in = removeTerminating(apply(in, plan, in.Now.Add(2*time.Minute)))
		}
	}
}
