package plugin

import "testing"

// The attempts' errors read as the kubelet's error aggregate prints them.
func TestAggregate(t *testing.T) {
	for _, c := range []struct {
		errs []string
		want string
	}{
		{[]string{"a"}, "a"},
		{[]string{"a", "a"}, "a"},
		{[]string{"a", "b", "a"}, "[a, b]"},
	} {
		if got := aggregate(c.errs); got != c.want {
			t.Errorf("aggregate(%q) = %q, want %q", c.errs, got, c.want)
		}
	}
}
