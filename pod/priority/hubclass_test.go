package priority

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func hubPod(class, annotation string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{PriorityClassName: class}}
	if annotation != "" {
		p.Annotations = map[string]string{AnnotationHubClass: annotation}
	}
	return p
}

func TestResolveHubTakesTheHubsClass(t *testing.T) {
	c := Builtin()
	p := hubPod("important", `{"value":1000,"preemptionPolicy":"Never"}`)
	if err := c.ResolveHub(p); err != nil || *p.Spec.Priority != 1000 || *p.Spec.PreemptionPolicy != v1.PreemptNever {
		t.Fatalf("resolved %v %v: %v", p.Spec.Priority, p.Spec.PreemptionPolicy, err)
	}
	// The device's own class of that name wins; a system class is built in.
	c.byName["important"] = Class{Name: "important", Value: 7, PreemptionPolicy: v1.PreemptLowerPriority}
	p = hubPod("important", `{"value":1000}`)
	if err := c.ResolveHub(p); err != nil || *p.Spec.Priority != 7 {
		t.Fatalf("the device's class: %v %v", p.Spec.Priority, err)
	}
	// Without the annotation an unknown class is refused, as before.
	if err := c.ResolveHub(hubPod("other", "")); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("unknown class without the annotation: %v", err)
	}
	for _, bad := range []string{`{"value":2000000000}`, `{"value":1,"preemptionPolicy":"Sometimes"}`, `{"value":1,"extra":1}`, `not json`} {
		if err := c.ResolveHub(hubPod("other", bad)); err == nil || !strings.Contains(err.Error(), AnnotationHubClass) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
