package gateway

import (
	"errors"
	"sync/atomic"
	"testing"
)

// /readyz answers the checks as the API server does: ok, or each check
// with its reason withheld and a 500; /livez and /healthz stay ok.
func TestReadyzChecks(t *testing.T) {
	var brokerDown atomic.Bool
	r := newRig(t, func(c *Config) {
		c.Ready = func() []Check {
			checks := []Check{{Name: "store"}, {Name: "broker"}}
			if brokerDown.Load() {
				checks[1].Err = errors.New("not connected to the broker")
			}
			return checks
		}
	})
	c := r.client(nil)
	if code, body, _ := r.do(c, "GET", "/readyz", "", nil, nil); code != 200 || body != "ok" {
		t.Fatalf("/readyz ready: %d %q", code, body)
	}
	brokerDown.Store(true)
	want := "[+]store ok\n[-]broker failed: reason withheld\nreadyz check failed\n"
	if code, body, _ := r.do(c, "GET", "/readyz", "", nil, nil); code != 500 || body != want {
		t.Fatalf("/readyz not ready: %d %q, want 500 %q", code, body, want)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if code, body, _ := r.do(c, "GET", p, "", nil, nil); code != 200 || body != "ok" {
			t.Errorf("%s while not ready: %d %q, want 200 ok", p, code, body)
		}
	}
}
