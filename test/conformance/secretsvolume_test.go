package conformance

// Ported from test/e2e/common/storage/secrets_volume.go ("Secrets"), as
// configmapvolume_test.go is.

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// "should be consumable from pods in volume [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doSecretE2EWithoutMapping(e.vol(), nil, unique("secret-test-"), nil, nil) })
}

// "should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInVolumeWithDefaultModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doSecretE2EWithoutMapping(e.vol(), ptr(int32(0o400)), unique("secret-test-"), nil, nil)
	})
}

// "should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInVolumeAsNonRootWithDefaultModeAndFSGroupSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		// setting fsGroup sets mode to at least 440
		doSecretE2EWithoutMapping(e.vol(), ptr(int32(0o440)), unique("secret-test-"), ptr(int64(1001)), ptr(nonRootTestUserID))
	})
}

// "should be consumable from pods in volume with mappings [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInVolumeWithMappings(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doSecretE2EWithMapping(e.vol(), nil) })
}

// "should be consumable from pods in volume with mappings and Item Mode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableFromPodsInVolumeWithMappingsAndItemModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doSecretE2EWithMapping(e.vol(), ptr(int32(0o400))) })
}

// "should be able to mount in a volume regardless of a different secret
// existing with same name in different namespace [NodeConformance]"
// (Conformance). The other namespace's Secret is a document of the same
// manifest directory with namespace: secret-namespace.
func TestSecrets_shouldBeAbleToMountInAVolumeRegardlessOfADifferentSecretExistingWithSameNameInDifferentNamespace(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		secret2Name := unique("secret-test-")
		secret2 := secretForTest("secret-namespace", secret2Name)
		secret2.Data = map[string][]byte{"this_should_not_match_content_of_other_secret": []byte("similarly_this_should_not_match_content_of_other_secret\n")}
		e.putObjects(secret2Name+"-ns2", secret2)
		doSecretE2EWithoutMapping(e.vol(), nil, secret2Name, nil, nil)
	})
}

// "should be consumable in multiple volumes in a pod [NodeConformance]" (Conformance)
func TestSecrets_shouldBeConsumableInMultipleVolumesInAPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("secret-test-")
		v.putObjects(name, secretForTest("default", name))
		src := v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-secrets-")},
			Spec: v1.PodSpec{
				Volumes: []v1.Volume{{Name: "secret-volume", VolumeSource: src}, {Name: "secret-volume-2", VolumeSource: src}},
				Containers: []v1.Container{{Name: "secret-volume-test",
					Command: e.mounttest("--file_content="+v.p("/etc/secret-volume/data-1"), "--file_mode="+v.p("/etc/secret-volume/data-1")),
					VolumeMounts: []v1.VolumeMount{{Name: "secret-volume", MountPath: v.p("/etc/secret-volume"), ReadOnly: true},
						{Name: "secret-volume-2", MountPath: v.p("/etc/secret-volume-2"), ReadOnly: true}}}},
				RestartPolicy: v1.RestartPolicyNever,
			}}
		v.output(pod, []string{
			"content of file \"" + v.p("/etc/secret-volume/data-1") + "\": value-1",
			getFileModeRegex(v.p("/etc/secret-volume/data-1"), nil),
		})
	})
}

// "optional updates should be reflected in volume [NodeConformance]" (Conformance)
func TestSecrets_optionalUpdatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		optionalUpdates(e.vol(), optionalCase{
			mountPath: "/etc/secret-volumes", podPrefix: "pod-secrets-",
			del: optionalObject{"s-test-opt-del-", "dels-volume-test", "deletes-volume"},
			upd: optionalObject{"s-test-opt-upd-", "upds-volume-test", "updates-volume"},
			cre: optionalObject{"s-test-opt-create-", "creates-volume-test", "creates-volume"},
			source: func(name string) v1.VolumeSource {
				return v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name, Optional: ptr(true)}}
			},
			object: secretOf,
		})
	})
}

// secretOf is a Secret of name in default holding data.
func secretOf(name string, data map[string]string) any {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// "should be immutable if `immutable` field is set" (Conformance), against
// objects.ValidateSecretUpdate as the ConfigMap's is.
func TestSecrets_shouldBeImmutableIfImmutableFieldIsSet(t *testing.T) {
	t.Parallel()
	update := func(cur *v1.Secret, change func(*v1.Secret)) (*v1.Secret, error) {
		next := cur.DeepCopy()
		change(next)
		if errs := objects.ValidateSecretUpdate(next, cur); len(errs) > 0 {
			return cur, errs.ToAggregate()
		}
		return next, nil
	}
	current := secretForTest("default", "immutable")
	current.UID, current.ResourceVersion = "c6b4f1f4-0000-4000-8000-000000000002", "1"
	objects.SetSecretDefaults(current)
	if errs := objects.ValidateSecret(current); len(errs) > 0 {
		t.Fatalf("Failed to create secret: %v", errs)
	}
	var err error
	if current, err = update(current, func(s *v1.Secret) { s.Data["data-4"] = []byte("value-4\n") }); err != nil {
		t.Fatalf("Failed to update secret: %v", err)
	}
	// Mark secret as immutable.
	if current, err = update(current, func(s *v1.Secret) { s.Immutable = ptr(true) }); err != nil {
		t.Fatalf("Failed to mark secret as immutable: %v", err)
	}
	// Ensure data can't be changed now.
	if _, err = update(current, func(s *v1.Secret) { s.Data["data-5"] = []byte("value-5\n") }); err == nil {
		t.Fatalf("expected 'invalid' as error, got instead: %v", err)
	}
	// Ensure secret can't be switched from immutable to mutable.
	if !*current.Immutable {
		t.Fatalf("currentSecret %s can be switched from immutable to mutable", current.Name)
	}
	if _, err = update(current, func(s *v1.Secret) { s.Immutable = ptr(false) }); err == nil {
		t.Fatalf("expected 'invalid' as error, got instead: %v", err)
	}
	// Ensure that metadata can be changed.
	if _, err = update(current, func(s *v1.Secret) { s.Labels = map[string]string{"label1": "value1"} }); err != nil {
		t.Fatalf("Failed to update secret: %v", err)
	}
}

// "Should fail non-optional pod creation due to secret object does not exist [Slow]"
func TestSecrets_shouldFailNonOptionalPodCreationDueToSecretObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, name := createNonOptionalSecretPod(v, v.p("/etc/secret-volumes"), unique("pod-secrets-"), false)
		v.consistentlyPending(pod, `secret "`+name+`" not found`, nonOptionalWindow)
	})
}

// "Should fail non-optional pod creation due to the key in the secret object does not exist [Slow]"
func TestSecrets_shouldFailNonOptionalPodCreationDueToTheKeyInTheSecretObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, _ := createNonOptionalSecretPod(v, v.p("/etc/secret-volumes"), unique("pod-secrets-"), true)
		v.consistentlyPending(pod, "references non-existent secret key: data_4", nonOptionalWindow)
	})
}

func doSecretE2EWithoutMapping(v *vol, defaultMode *int32, secretName string, fsGroup, uid *int64) {
	v.putObjects(secretName, secretForTest("default", secretName))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-secrets-"), Namespace: "default"},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "secret-volume", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: secretName}}}},
			Containers: []v1.Container{{Name: "secret-volume-test",
				Command:      v.mounttest("--file_content="+v.p("/etc/secret-volume/data-1"), "--file_mode="+v.p("/etc/secret-volume/data-1")),
				VolumeMounts: []v1.VolumeMount{{Name: "secret-volume", MountPath: v.p("/etc/secret-volume")}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	if defaultMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Secret.DefaultMode = defaultMode
	}
	if fsGroup != nil || uid != nil {
		pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: fsGroup, RunAsUser: uid}
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/secret-volume/data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/secret-volume/data-1"), defaultMode),
	})
}

func doSecretE2EWithMapping(v *vol, mode *int32) {
	name := unique("secret-test-map-")
	v.putObjects(name, secretForTest("default", name))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-secrets-")},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "secret-volume", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name,
				Items: []v1.KeyToPath{{Key: "data-1", Path: "new-path-data-1"}}}}}},
			Containers: []v1.Container{{Name: "secret-volume-test",
				Command:      v.mounttest("--file_content="+v.p("/etc/secret-volume/new-path-data-1"), "--file_mode="+v.p("/etc/secret-volume/new-path-data-1")),
				VolumeMounts: []v1.VolumeMount{{Name: "secret-volume", MountPath: v.p("/etc/secret-volume")}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	if mode != nil {
		pod.Spec.Volumes[0].VolumeSource.Secret.Items[0].Mode = mode
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/secret-volume/new-path-data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/secret-volume/new-path-data-1"), mode),
	})
}

// createNonOptionalSecretPod is upstream's createNonOptionalSecretPod or,
// withSecret, createNonOptionalSecretPodWithSecret (the Secret exists;
// the item's key data_4 does not). It returns the pod and the Secret's
// name.
func createNonOptionalSecretPod(v *vol, volumeMountPath, podName string, withSecret bool) (*v1.Pod, string) {
	createName := unique("s-test-opt-create-")
	if withSecret {
		v.putObjects(createName, secretForTest("default", createName))
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "creates-volume", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: createName, Optional: ptr(false)}}}},
			Containers: []v1.Container{{Name: "creates-volume-test",
				Command:      v.mounttest("--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p("/etc/secret-volumes/create/data-1")),
				VolumeMounts: []v1.VolumeMount{{Name: "creates-volume", MountPath: volumeMountPath + "/create", ReadOnly: true}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	if withSecret {
		pod.Spec.Volumes[0].VolumeSource.Secret.Items = []v1.KeyToPath{{Key: "data_4", Path: "value-4\n"}}
	}
	v.create(pod)
	return pod, createName
}
