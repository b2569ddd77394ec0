package workloadfile

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"
)

// The documents decode as the objects they name: labels and selector
// app=<name>, the pod spec lines in the template's spec, replicas left
// out when asked.
func TestDocumentsDecode(t *testing.T) {
	docs := strings.Split(File(
		PriorityClass("important", 1000),
		DaemonSet("agent", `containers: [{name: c, image: host}]`),
		Deployment("bridge", 3, "priorityClassName: important", Spread("zone", "bridge"), `
containers:
- name: c
  image: host`),
		Deployment("once", -1, `containers: [{name: c, image: host}]`)), "---\n")
	if len(docs) != 4 {
		t.Fatalf("%d documents, want 4", len(docs))
	}
	var pc schedulingv1.PriorityClass
	var ds appsv1.DaemonSet
	var bridge, once appsv1.Deployment
	for i, into := range []any{&pc, &ds, &bridge, &once} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, docs[i])
		}
	}
	if pc.Kind != "PriorityClass" || pc.Name != "important" || pc.Value != 1000 {
		t.Errorf("PriorityClass %+v", pc)
	}
	if ds.Kind != "DaemonSet" || ds.Name != "agent" || ds.Spec.Selector.MatchLabels["app"] != "agent" ||
		ds.Spec.Template.Labels["app"] != "agent" || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("DaemonSet %+v", ds)
	}
	spread := bridge.Spec.Template.Spec.TopologySpreadConstraints
	if bridge.Kind != "Deployment" || bridge.Spec.Replicas == nil || *bridge.Spec.Replicas != 3 ||
		bridge.Spec.Template.Labels["app"] != "bridge" || bridge.Spec.Template.Spec.PriorityClassName != "important" ||
		len(spread) != 1 || spread[0].TopologyKey != "zone" || spread[0].MaxSkew != 1 ||
		spread[0].WhenUnsatisfiable != "DoNotSchedule" || spread[0].LabelSelector.MatchLabels["app"] != "bridge" ||
		len(bridge.Spec.Template.Spec.Containers) != 1 || bridge.Spec.Template.Spec.Containers[0].Image != "host" {
		t.Errorf("Deployment %+v", bridge)
	}
	if once.Spec.Replicas != nil {
		t.Errorf("replicas -1 wrote spec.replicas %d", *once.Spec.Replicas)
	}
}
