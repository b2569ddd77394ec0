package e2e

import (
	"strings"
	"testing"
)

// A config podvisor cannot honour stops `podvisor run` before it makes
// anything: exit 1 and one line naming the file and every bad setting.
// (A zero manifestResync used to panic the daemon after it had taken its
// directories; a key in another case, as "allowunsigned", used to be taken
// for the real one.)
func TestConfigRefusedBeforeAnything(t *testing.T) {
	d := newDaemon(t)
	for _, tc := range []struct {
		body  string
		flags []string
		want  []string
	}{
		{"manifestResync: 0s\nlogs: {maxFiles: 0}\n", nil, []string{"manifestResync: must be a positive duration", "logs.maxFiles: must be at least 1"}},
		{"hub: {url: \"mqtt://127.0.0.1:1\", allowunsigned: true}\n", nil, []string{`unknown field "hub.allowunsigned"`}},
		{"hub: {url: \"mqtt://127.0.0.1:1\", allowUnsigned: true}\n", []string{"--hub-key", "/etc/podvisor/hub.pub"},
			[]string{"hub.allowUnsigned", "--hub-key", "/etc/podvisor/hub.pub"}},
		{"eviction: {hard: {memory.available: lots}}\n", nil, []string{"eviction.hard[memory.available]"}},
	} {
		d.withConfig(tc.body)
		d.config = "" // written afresh by runOnce
		stderr, code := d.runOnce(tc.flags...)
		if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "error: config "+d.config+": ") {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 and one line naming %s", tc.body, code, stderr, d.config)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr %q does not say %s", tc.body, stderr, w)
			}
		}
		if exists(d.data) || exists(d.socket) {
			t.Fatalf("%q: a refused config made the data directory or the socket", tc.body)
		}
	}
}
