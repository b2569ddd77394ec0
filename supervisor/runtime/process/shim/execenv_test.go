package shim

import (
	"slices"
	"testing"
)

// An environment file gives back its environment and command, empty
// arguments included; a damaged one is refused.
func TestEnvFileRoundTrip(t *testing.T) {
	for _, c := range []struct{ env, argv []string }{
		{[]string{"PATH=/bin", "PW=s3cret", "EMPTY="}, []string{"sh", "-c", "", "x"}},
		{nil, []string{"/app"}},
	} {
		env, argv, err := ParseEnvFile(FormatEnvFile(c.env, c.argv))
		if err != nil || !slices.Equal(env, c.env) || !slices.Equal(argv, c.argv) {
			t.Fatalf("got %q %q %v, want %q %q", env, argv, err, c.env, c.argv)
		}
	}
	for _, bad := range []string{"", "A=1", "A=1\x00B=2\x00"} {
		if _, _, err := ParseEnvFile([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

// HOME is runc's where the container's environment sets none.
func TestWithHome(t *testing.T) {
	if got := withHome([]string{"A=1"}, "/root"); !slices.Equal(got, []string{"A=1", "HOME=/root"}) {
		t.Fatalf("%q", got)
	}
	if got := withHome([]string{"HOME=/h"}, "/root"); !slices.Equal(got, []string{"HOME=/h"}) {
		t.Fatalf("%q", got)
	}
}
