// Package workloadfile writes the files of workloads that the tests and
// benchmarks of podhub's scheduler apply: the apps/v1 skeleton of a
// DaemonSet or Deployment (its selector, template and labels, all
// app=<name>) around the pod spec a test chooses, and PriorityClasses.
// It imports no podvisor package, so that in-package tests can use it.
package workloadfile

import (
	"fmt"
	"strings"
)

// DaemonSet is a DaemonSet named name, labelling its pods app=name, whose
// pod template's spec is podSpec: YAML lines written as if at the left
// margin (a test's own fields: containers, tolerations...).
func DaemonSet(name string, podSpec ...string) string {
	return workload("DaemonSet", name, "", podSpec)
}

// Deployment is a Deployment like DaemonSet's, with replicas pods;
// replicas < 0 leaves spec.replicas out (the API's default, 1).
func Deployment(name string, replicas int, podSpec ...string) string {
	r := ""
	if replicas >= 0 {
		r = fmt.Sprintf("  replicas: %d\n", replicas)
	}
	return workload("Deployment", name, r, podSpec)
}

func workload(kind, name, replicas string, podSpec []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: apps/v1\nkind: %s\nmetadata: {name: %s}\nspec:\n%s", kind, name, replicas)
	fmt.Fprintf(&b, "  selector: {matchLabels: {app: %s}}\n  template:\n    metadata: {labels: {app: %s}}\n    spec:\n", name, name)
	for _, part := range podSpec {
		for _, line := range strings.Split(strings.Trim(part, "\n"), "\n") {
			b.WriteString("      " + line + "\n")
		}
	}
	return b.String()
}

// PriorityClass is a PriorityClass named name of value.
func PriorityClass(name string, value int) string {
	return fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: %d\n", name, value)
}

// Spread is the pod spec lines that spread app's pods evenly (maxSkew 1,
// DoNotSchedule) over the values of the device label key.
func Spread(key, app string) string {
	return fmt.Sprintf("topologySpreadConstraints:\n"+
		"- {maxSkew: 1, topologyKey: %s, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: %s}}}", key, app)
}

// File joins documents into one file, as apply -f reads it.
func File(docs ...string) string {
	return strings.Join(docs, "---\n")
}
