package manifest

import (
	"strings"
	"testing"
)

// A self-fencing lease is validated where every pod is, on the device
// and at the hub: a whole number of seconds from 1 to 86400.
func TestLeaseAnnotationValidated(t *testing.T) {
	pod := func(v string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {fencing.podvisor.io/lease-seconds: \"" + v +
			"\"}\nspec:\n  containers: [{name: c, image: host}]\n"
	}
	if _, err := Decode([]byte(pod("30"))); err != nil {
		t.Fatalf("a 30 s lease: %v", err)
	}
	for _, bad := range []string{"0", "86401", "ten", "1.5", "007"} {
		_, err := Decode([]byte(pod(bad)))
		if err == nil || !strings.Contains(err.Error(), "metadata.annotations[fencing.podvisor.io/lease-seconds]") {
			t.Errorf("lease %q: %v, want refused naming the annotation", bad, err)
		}
	}
}
