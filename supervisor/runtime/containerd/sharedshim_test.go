package containerd

import "testing"

// A device-wide shim is warned about on containerd 1.x only, and never
// with a shim per pod or per container.
func TestSharedShimCost(t *testing.T) {
	for _, c := range []struct {
		group, version string
		warn           bool
	}{
		{"device", "1.6.20~ds1", true},
		{"device", "v1.7.28", true},
		{"", "1.6.20", true}, // the runtime's default group is the device's
		{"device", "2.1.4", false},
		{"device", "v2.4.2", false},
		{"device", "", false}, // unknown: no claim
		{"pod", "1.6.20", false},
		{"container", "1.6.20", false},
	} {
		if got := sharedShimCost(c.group, c.version) != ""; got != c.warn {
			t.Errorf("group %q on containerd %q: warned %v, want %v", c.group, c.version, got, c.warn)
		}
	}
}
