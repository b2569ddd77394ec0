package priority

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const classes = `apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch}
value: 10
globalDefault: true
preemptionPolicy: Never
`

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "classes.yaml", classes)
	c, errs := LoadDir(dir)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		class  string
		value  int32
		policy v1.PreemptionPolicy
	}{
		{"high", 1000, v1.PreemptLowerPriority},
		{"", 10, v1.PreemptNever}, // the global default
		{"system-node-critical", 2000001000, v1.PreemptLowerPriority},
		{"system-cluster-critical", 2000000000, v1.PreemptLowerPriority},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{PriorityClassName: tc.class}}
		if err := c.Resolve(p); err != nil {
			t.Fatal(err)
		}
		if *p.Spec.Priority != tc.value || *p.Spec.PreemptionPolicy != tc.policy {
			t.Errorf("%q: priority %d policy %s", tc.class, *p.Spec.Priority, *p.Spec.PreemptionPolicy)
		}
		// Priority admission fills both fields from the global default.
		if tc.class == "" && p.Spec.PriorityClassName != "batch" {
			t.Errorf("global default: priorityClassName %q, want %q", p.Spec.PriorityClassName, "batch")
		}
	}
	// Without a global default the name stays empty and the priority 0.
	none := &v1.Pod{}
	if err := Builtin().Resolve(none); err != nil || none.Spec.PriorityClassName != "" || *none.Spec.Priority != 0 {
		t.Fatalf("no default class: %v %q %d", err, none.Spec.PriorityClassName, *none.Spec.Priority)
	}
	err := c.Resolve(&v1.Pod{Spec: v1.PodSpec{PriorityClassName: "nope"}})
	if err == nil || !strings.Contains(err.Error(), `no PriorityClass with name "nope"`) || !strings.Contains(err.Error(), "high") {
		t.Fatalf("unknown class: %v", err)
	}
	if err := Builtin().Resolve(&v1.Pod{}); err != nil {
		t.Fatal(err)
	}
	if !IsCritical(2000000000) || IsCritical(1000000000) {
		t.Fatal("critical threshold")
	}
}

func TestBadClassFiles(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"reserved":      {"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 1\n", "reserved"},
		"too high":      {"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: x}\nvalue: 1000000001\n", "value"},
		"unknown field": {"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: x}\nvalue: 1\nvalu: 2\n", "valu"},
		"bad policy":    {"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: x}\nvalue: 1\npreemptionPolicy: Sometimes\n", "preemptionPolicy"},
		"two defaults":  {classes + "---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 1\nglobalDefault: true\n", "globalDefault"},
		"wrong kind":    {"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "PriorityClass"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "bad.yaml", tc.body)
			_, errs := LoadDir(dir)
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || !strings.Contains(errs[0].Error(), "bad.yaml") {
				t.Fatalf("errors = %v, want one naming bad.yaml and %q", errs, tc.want)
			}
		})
	}
}
