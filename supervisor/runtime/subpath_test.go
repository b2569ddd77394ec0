package runtime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// The node e2e expansion tests' subPathExpr cases and the kubelet's
// ExpandContainerVolumeMounts errors.
func TestSubPath(t *testing.T) {
	c := &v1.Container{Env: []v1.EnvVar{{Name: "POD_NAME"}, {Name: "UP"}, {Name: "ABS"}, {Name: "EMPTY"}}}
	env := []string{"PATH=/bin", "HOSTNAME=web", "POD_NAME=web", "UP=..", "ABS=/tmp", "EMPTY="}
	for _, tc := range []struct{ sub, expr, want, err string }{
		{sub: "plain", want: "plain"},
		{expr: "$(POD_NAME)", want: "web"},
		{expr: "logs/$(POD_NAME)/$$x", want: "logs/web/$x"},
		{expr: "$(UP)", err: "unable to provision SubPath `..`: must not contain '..'"},
		{expr: "$(ABS)", err: "error SubPath `/tmp` must not be an absolute path"},
		{expr: "$(EMPTY)/$(NOPE)/$(HOSTNAME)", err: "missing value for EMPTY, HOSTNAME, NOPE"},
	} {
		got, err := SubPath(v1.VolumeMount{SubPath: tc.sub, SubPathExpr: tc.expr}, c, env)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q%q: %q, %v; want %q, %q", tc.sub, tc.expr, got, err, tc.want, tc.err)
		}
	}
}
