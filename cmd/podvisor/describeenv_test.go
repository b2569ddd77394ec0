package main

import (
	"bytes"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// describe shows where env comes from as kubectl does, never a value
// from a ConfigMap or Secret.
func TestDescribeEnvSources(t *testing.T) {
	yes := true
	c := v1.Container{Name: "app",
		EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
			{Prefix: "DB_", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Optional: &yes}},
		},
		Env: []v1.EnvVar{
			{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "password"}}},
			{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Key: "mode"}}},
		}}
	var b bytes.Buffer
	describeContainers(&b, "Containers", []v1.Container{c}, nil)
	for _, want := range []string{
		"    Environment Variables from:\n      app\tConfigMap\tOptional: false\n      db\tSecret with prefix 'DB_'\tOptional: true\n",
		"      PW:\t<set to the key 'password' in secret 'db'>\tOptional: false\n",
		"      MODE:\t<set to the key 'mode' of config map 'app'>\tOptional: false\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, b.String())
		}
	}
}
