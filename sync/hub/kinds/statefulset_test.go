package kinds

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

const statefulSetFile = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
      annotations: {fencing.podvisor.io/lease-seconds: "30"}
    spec:
      runtimeClassName: process
      containers:
      - name: db
        image: host
        command: ["sleep", "infinity"]
`

// A StatefulSet gets the API server's defaults; serviceName may be empty.
func TestDecodeStatefulSetDefaults(t *testing.T) {
	objs, err := Decode("f.yaml", []byte(statefulSetFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.StatefulSets) != 1 || objs.Len() != 1 {
		t.Fatalf("decoded %d StatefulSets, %d objects", len(objs.StatefulSets), objs.Len())
	}
	s := objs.StatefulSets[0].Spec
	if *s.Replicas != 1 || s.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
		s.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || *s.UpdateStrategy.RollingUpdate.Partition != 0 ||
		s.UpdateStrategy.RollingUpdate.MaxUnavailable != nil || *s.RevisionHistoryLimit != 10 ||
		s.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		s.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("defaults: %+v", s)
	}
}

func TestDecodeStatefulSetRejects(t *testing.T) {
	spec := "spec:\n  selector"
	with := func(field string) string {
		return strings.Replace(statefulSetFile, spec, "spec:\n  "+field+"\n  selector", 1)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"policy", with("podManagementPolicy: Burst"), `StatefulSet "db": spec.podManagementPolicy: Invalid value: "Burst": must be 'OrderedReady' or 'Parallel'`},
		{"strategy", with("updateStrategy: {type: Recreate}"), `spec.updateStrategy: Invalid value`},
		{"ondelete with rollingUpdate", with("updateStrategy: {type: OnDelete, rollingUpdate: {partition: 1}}"),
			`spec.updateStrategy.rollingUpdate: Invalid value`},
		{"negative partition", with("updateStrategy: {rollingUpdate: {partition: -1}}"), `spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0`},
		{"zero maxUnavailable", with("updateStrategy: {rollingUpdate: {maxUnavailable: 0}}"), `spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: cannot be 0`},
		{"maxUnavailable over 100%", with("updateStrategy: {rollingUpdate: {maxUnavailable: 101%}}"), `must not be greater than 100%`},
		{"negative replicas", with("replicas: -1"), `spec.replicas: Invalid value: -1: must be greater than or equal to 0`},
		{"retention", with("persistentVolumeClaimRetentionPolicy: {whenDeleted: Keep}"),
			`spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: "Keep": supported values: "Retain", "Delete"`},
		{"claims", with("volumeClaimTemplates: [{metadata: {name: data}}]"), `spec.volumeClaimTemplates: Forbidden: the hub has no volume provisioner`},
		{"service name", with("serviceName: Not_A_Label"), `spec.serviceName: Invalid value: "Not_A_Label"`},
		{"name not a label", strings.Replace(statefulSetFile, "name: db\n", "name: db.x\n", 1), `metadata.name: Invalid value: "db.x"`},
		{"selector", strings.Replace(statefulSetFile, "matchLabels: {app: db}", "matchLabels: {app: web}", 1), "`selector` does not match template `labels`"},
		{"lease", strings.Replace(statefulSetFile, `"30"`, `"30s"`, 1),
			`spec.template.metadata.annotations[fencing.podvisor.io/lease-seconds]: Invalid value: "30s": must be a whole number of seconds from 1 to 86400`},
		{"unknown field", with("replica: 2"), `unknown field "spec.replica"`},
	} {
		_, err := Decode("f.yaml", []byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Only replicas, template, updateStrategy and a few more may change.
func TestStatefulSetUpdate(t *testing.T) {
	objs, err := Decode("f.yaml", []byte(statefulSetFile))
	if err != nil {
		t.Fatal(err)
	}
	old := objs.StatefulSets[0]
	s := old.DeepCopy()
	*s.Spec.Replicas = 5
	s.Spec.Template.Spec.Containers[0].Image = "other"
	if errs := ValidateStatefulSetUpdate(s, old); len(errs) != 0 {
		t.Fatalf("replicas and template refused: %v", errs)
	}
	s.Spec.ServiceName = "db"
	if errs := ValidateStatefulSetUpdate(s, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), "updates to statefulset spec for fields other than") {
		t.Fatalf("serviceName change: %v", errs)
	}
}
