package config

import (
	"strings"
	"testing"
)

func TestMetricsListenValidation(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		err  string // "" valid
	}{
		{"", ""},
		{"metrics: {listen: 127.0.0.1:10255}", ""},
		{"metrics: {listen: \"[::1]:10255\"}", ""},
		{"metrics: {listen: localhost:9100}", ""},
		{"metrics: {listen: unix:/run/podvisor/metrics.sock}", ""},
		{"metrics: {listen: 0.0.0.0:10255, bearerTokenFile: /etc/podvisor/metrics.token}", ""},
		{"metrics: {listen: 0.0.0.0:10255}", "not a loopback address"},
		{"metrics: {listen: \":10255\"}", "not a loopback address"},
		{"metrics: {listen: 192.168.1.5:10255}", "not a loopback address"},
		{"metrics: {listen: unix:metrics.sock}", "absolute path"},
		{"metrics: {listen: 127.0.0.1}", "HOST:PORT"},
		{"metrics: {listen: 127.0.0.1:0}", "port"},
		{"metrics: {listen: 127.0.0.1:99999}", "port"},
		{"metrics: {bearerTokenFile: /t}", "metrics are off"},
		{"metrics: {listen: 127.0.0.1:1, bearerTokenFile: t}", "absolute path"},
		{"metrics: {listen: 127.0.0.1:1, bearer: x}", "unknown field"},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one saying %q", tc.yaml, err, tc.err)
		}
	}
}

func TestMetricsAddress(t *testing.T) {
	for listen, want := range map[string][2]string{
		"":                       {"", ""},
		"127.0.0.1:10255":        {"tcp", "127.0.0.1:10255"},
		"unix:/run/p/metrics.sk": {"unix", "/run/p/metrics.sk"},
	} {
		n, a := Metrics{Listen: listen}.MetricsAddress()
		if n != want[0] || a != want[1] {
			t.Errorf("%q: %s %s, want %s %s", listen, n, a, want[0], want[1])
		}
	}
	if !Default().Metrics.Loopback() || Default().Metrics.Listen != "" {
		t.Error("metrics must be off by default")
	}
}
