package conformance

// Ported from test/e2e/common/node/configmap.go ("ConfigMap") and
// secrets.go ("Secrets"): env and envFrom, and the API server's empty-key
// checks against objects.ValidateConfigMap/ValidateSecret.
//
// Upstream's containers run `sh -c env`; here they run `env` itself: the
// host's shell (dash) and the test image's (busybox 1.35 ash) drop
// variables whose names are no shell identifiers (data-1, 1-data-1)
// before env could print them. The variables the container gets are the
// same.

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

func envPod(name, container string, env []v1.EnvVar, envFrom []v1.EnvFromSource) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			Containers:    []v1.Container{{Name: container, Command: []string{"env"}, Env: env, EnvFrom: envFrom}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
}

// "should be consumable via environment variable [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableViaEnvironmentVariable(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		name := unique("configmap-test-")
		e.putObjects(name, newConfigMap(name))
		pod := envPod(unique("pod-configmaps-"), "env-test", []v1.EnvVar{{Name: "CONFIG_DATA_1", ValueFrom: &v1.EnvVarSource{
			ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: "data-1"}}}}, nil)
		e.vol().outputContains(pod, []string{"CONFIG_DATA_1=value-1"})
	})
}

// "should be consumable via the environment [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableViaTheEnvironment(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		name := unique("configmap-test-")
		e.putObjects(name, newConfigMap(name))
		ref := &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}
		pod := envPod(unique("pod-configmaps-"), "env-test", nil, []v1.EnvFromSource{{ConfigMapRef: ref}, {Prefix: "p-", ConfigMapRef: ref}})
		e.vol().outputContains(pod, []string{
			"data-1=value-1", "data-2=value-2", "data-3=value-3",
			"p-data-1=value-1", "p-data-2=value-2", "p-data-3=value-3",
		})
	})
}

// "should fail to create ConfigMap with empty key" (Conformance): the API
// server's check, objects.ValidateConfigMap (what podhub apply and a
// manifest file's ConfigMap document go through).
func TestConfigMap_shouldFailToCreateConfigMapWithEmptyKey(t *testing.T) {
	t.Parallel()
	configMap := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "configmap-test-emptykey"},
		Data: map[string]string{"": "value-1"}}
	if errs := objects.ValidateConfigMap(configMap); len(errs) == 0 {
		t.Fatalf("created configMap %q with empty key in namespace %q", configMap.Name, configMap.Namespace)
	}
}

// "should be consumable from pods in env vars [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInEnvVars(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		name := unique("secret-test-")
		e.putObjects(name, secretForTest("default", name))
		pod := envPod(unique("pod-secrets-"), "secret-env-test", []v1.EnvVar{{Name: "SECRET_DATA", ValueFrom: &v1.EnvVarSource{
			SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: "data-1"}}}}, nil)
		e.vol().outputContains(pod, []string{"SECRET_DATA=value-1"})
	})
}

// "should be consumable via the environment [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableViaTheEnvironment(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		name := unique("secret-test-")
		e.putObjects(name, secretForTest("default", name))
		ref := &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}
		pod := envPod(unique("pod-configmaps-"), "env-test", nil, []v1.EnvFromSource{{SecretRef: ref}, {Prefix: "p-", SecretRef: ref}})
		e.vol().outputContains(pod, []string{
			"data-1=value-1", "data-2=value-2", "data-3=value-3",
			"p-data-1=value-1", "p-data-2=value-2", "p-data-3=value-3",
		})
	})
}

// "should fail to create secret due to empty secret key" (Conformance),
// against objects.ValidateSecret.
func TestSecrets_shouldFailToCreateSecretDueToEmptySecretKey(t *testing.T) {
	t.Parallel()
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "secret-emptykey-test"},
		Data: map[string][]byte{"": []byte("value-1\n")}}
	if errs := objects.ValidateSecret(secret); len(errs) == 0 {
		t.Fatalf("created secret %q with empty key in namespace %q", secret.Name, secret.Namespace)
	}
}

// "should be consumable as environment variable names variable names with various prefixes" (Conformance)
func TestSecrets_shouldBeConsumableAsEnvironmentVariableNamesWithVariousPrefixes(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		name := unique("secret-test-")
		e.putObjects(name, secretForTest("default", name))
		ref := &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}
		pod := envPod(unique("pod-secret-"), "env-test", nil, []v1.EnvFromSource{
			{SecretRef: ref},                 // No prefix
			{Prefix: "1-", SecretRef: ref},   // Prefix starting with a digit
			{Prefix: "$_-", SecretRef: ref},  // Prefix with special characters
			{Prefix: "ABC_", SecretRef: ref}, // Prefix with uppercase letters
			{Prefix: "#@!", SecretRef: ref},  // Prefix with symbols
		})
		e.vol().outputContains(pod, []string{
			"data-1=value-1", "data-2=value-2", "data-3=value-3",
			"1-data-1=value-1", "1-data-2=value-2", "1-data-3=value-3",
			"$_-data-1=value-1", "$_-data-2=value-2", "$_-data-3=value-3",
			"ABC_data-1=value-1", "ABC_data-2=value-2", "ABC_data-3=value-3",
			"#@!data-1=value-1", "#@!data-2=value-2", "#@!data-3=value-3",
		})
	})
}
