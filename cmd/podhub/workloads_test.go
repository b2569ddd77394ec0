package main

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseTaintAsKubectl(t *testing.T) {
	for spec, want := range map[string]struct {
		key, value string
		effect     v1.TaintEffect
		remove     bool
	}{
		"dedicated=cam:NoSchedule": {"dedicated", "cam", v1.TaintEffectNoSchedule, false},
		"gpu:NoExecute":            {"gpu", "", v1.TaintEffectNoExecute, false},
		"dedicated:NoSchedule-":    {"dedicated", "", v1.TaintEffectNoSchedule, true},
		"dedicated-":               {"dedicated", "", "", true},
	} {
		got, err := parseTaint(spec)
		if err != nil || got.Taint.Key != want.key || got.Taint.Value != want.value || got.Taint.Effect != want.effect || got.Remove != want.remove {
			t.Errorf("%s: got %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"dedicated=cam", "=v:NoSchedule", ":NoSchedule"} {
		if _, err := parseTaint(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
