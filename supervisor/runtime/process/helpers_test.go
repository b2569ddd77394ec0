package process

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/test/prereq"
)

func testPod() *v1.Pod {
	uid := int64(1000)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1", Labels: map[string]string{"tier": "front"}},
		Spec: v1.PodSpec{
			SecurityContext: &v1.PodSecurityContext{RunAsUser: &uid},
			Containers: []v1.Container{{
				Name:    "app",
				Command: []string{"echo"},
				Args:    []string{"$(GREETING)", "$(NOPE)", "$$(POD)"},
				Env: []v1.EnvVar{
					{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "NS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "UID", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
					{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "GREETING", Value: "hello $(POD)"},
					{Name: "TIER", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}}},
				},
			}},
		},
	}
}

// missing skips a test whose prerequisite this machine lacks, except under
// CI=true, where a missing prerequisite fails it.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	prereq.Missing(t, format, args...)
}
