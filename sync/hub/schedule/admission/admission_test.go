package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
)

// A class gives its value and policy (PreemptLowerPriority when it names
// none); no class at all is 0 and PreemptLowerPriority.
func TestClassPriority(t *testing.T) {
	never := v1.PreemptNever
	for _, c := range []struct {
		class  *schedulingv1.PriorityClass
		value  int32
		policy v1.PreemptionPolicy
	}{
		{nil, 0, v1.PreemptLowerPriority},
		{&schedulingv1.PriorityClass{Value: 1000}, 1000, v1.PreemptLowerPriority},
		{&schedulingv1.PriorityClass{Value: -5, PreemptionPolicy: &never}, -5, v1.PreemptNever},
	} {
		if value, policy := ClassPriority(c.class); value != c.value || policy != c.policy {
			t.Errorf("ClassPriority(%+v) = %d, %s; want %d, %s", c.class, value, policy, c.value, c.policy)
		}
	}
}
