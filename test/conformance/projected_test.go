package conformance

// Ported from test/e2e/common/storage/projected_configmap.go ("Projected
// configMap"), projected_secret.go ("Projected secret") and
// projected_combined.go ("Projected combined"), as configmapvolume_test.go
// is. Where upstream's projected test calls a plain configMap or secret
// helper (the non-optional tests), so does the port.

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// "should be consumable from pods in volume [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithoutMappings(e.vol(), false, 0, nil) })
}

// "should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeWithDefaultModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doProjectedConfigMapE2EWithoutMappings(e.vol(), false, 0, ptr(int32(0o400)))
	})
}

// "should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeFeature:FSGroup]"
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRootWithDefaultModeAndFSGroupSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doProjectedConfigMapE2EWithoutMappings(e.vol(), true, 1001, ptr(int32(0o440)))
	})
}

// "should be consumable from pods in volume as non-root [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRoot(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithoutMappings(e.vol(), true, 0, nil) })
}

// "should be consumable from pods in volume as non-root with FSGroup [LinuxOnly] [NodeFeature:FSGroup]"
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRootWithFSGroup(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithoutMappings(e.vol(), true, 1001, nil) })
}

// "should be consumable from pods in volume with mappings [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeWithMappings(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithMappings(e.vol(), false, 0, nil) })
}

// "should be consumable from pods in volume with mappings and Item mode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAndItemModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithMappings(e.vol(), false, 0, ptr(int32(0o400))) })
}

// "should be consumable from pods in volume with mappings as non-root [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAsNonRoot(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithMappings(e.vol(), true, 0, nil) })
}

// "should be consumable from pods in volume with mappings as non-root with FSGroup [LinuxOnly] [NodeFeature:FSGroup]"
func TestProjectedConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAsNonRootWithFSGroup(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedConfigMapE2EWithMappings(e.vol(), true, 1001, nil) })
}

// "updates should be reflected in volume [NodeConformance]" (Conformance)
func TestProjectedConfigMap_updatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("projected-configmap-test-upd-")
		configMap := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"data-1": "value-1"}}
		v.putObjects(name, configMap)
		pod := createProjectedConfigMapMounttestPod(v, "projected-configmap-volume", name, v.p("/etc/projected-configmap-volume"),
			"--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p("/etc/projected-configmap-volume/data-1"))
		v.createSync(pod)
		v.eventuallyLog(pod, pod.Spec.Containers[0].Name, "value-1")

		// Updating configmap
		configMap.Data["data-1"] = "value-2"
		v.putObjects(name, configMap)
		// waiting to observe update in volume
		v.eventuallyLog(pod, pod.Spec.Containers[0].Name, "value-2")
	})
}

// projectedConfigMap is a projected volume of one ConfigMap.
func projectedConfigMap(name string, optional *bool) v1.VolumeSource {
	return v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{
		ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: optional}}}}}
}

// projectedSecret is a projected volume of one Secret.
func projectedSecret(name string, optional *bool) v1.VolumeSource {
	return v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{
		Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: optional}}}}}
}

// "optional updates should be reflected in volume [NodeConformance]" (Conformance)
func TestProjectedConfigMap_optionalUpdatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		optionalUpdates(e.vol(), optionalCase{
			mountPath: "/etc/projected-configmap-volumes", podPrefix: "pod-projected-configmaps-",
			del:    optionalObject{"cm-test-opt-del-", "delcm-volume-test", "deletecm-volume"},
			upd:    optionalObject{"cm-test-opt-upd-", "updcm-volume-test", "updatecm-volume"},
			cre:    optionalObject{"cm-test-opt-create-", "createcm-volume-test", "createcm-volume"},
			source: func(name string) v1.VolumeSource { return projectedConfigMap(name, ptr(true)) },
			object: func(name string, data map[string]string) any {
				return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: data}
			},
		})
	})
}

// "should be consumable in multiple volumes in the same pod [NodeConformance]" (Conformance)
func TestProjectedConfigMap_shouldBeConsumableInMultipleVolumesInTheSamePod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("projected-configmap-test-volume-")
		v.putObjects(name, newConfigMap(name))
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-projected-configmaps-")},
			Spec: v1.PodSpec{
				Volumes: []v1.Volume{{Name: "projected-configmap-volume", VolumeSource: projectedConfigMap(name, nil)},
					{Name: "projected-configmap-volume-2", VolumeSource: projectedConfigMap(name, nil)}},
				Containers: []v1.Container{{Name: "projected-configmap-volume-test", Command: e.mounttest("--file_content=" + v.p("/etc/projected-configmap-volume/data-1")),
					VolumeMounts: []v1.VolumeMount{{Name: "projected-configmap-volume", MountPath: v.p("/etc/projected-configmap-volume"), ReadOnly: true},
						{Name: "projected-configmap-volume-2", MountPath: v.p("/etc/projected-configmap-volume-2"), ReadOnly: true}}}},
				RestartPolicy: v1.RestartPolicyNever,
			}}
		v.outputContains(pod, []string{"content of file \"" + v.p("/etc/projected-configmap-volume/data-1") + "\": value-1"})
	})
}

// "Should fail non-optional pod creation due to configMap object does not exist [Slow]": upstream's
// createNonOptionalConfigMapPod, a configMap volume.
func TestProjectedConfigMap_shouldFailNonOptionalPodCreationDueToConfigMapObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, name := createNonOptionalConfigMapPod(v, v.p("/etc/projected-configmap-volumes"), false)
		v.consistentlyPending(pod, `configmap "`+name+`" not found`, nonOptionalWindow)
	})
}

// "Should fail non-optional pod creation due to the key in the configMap object does not exist [Slow]"
func TestProjectedConfigMap_shouldFailNonOptionalPodCreationDueToTheKeyInTheConfigMapObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, _ := createNonOptionalConfigMapPod(v, v.p("/etc/configmap-volumes"), true)
		v.consistentlyPending(pod, "configmap references non-existent config key: data-4", nonOptionalWindow)
	})
}

func doProjectedConfigMapE2EWithoutMappings(v *vol, asUser bool, fsGroup int64, defaultMode *int32) {
	name := unique("projected-configmap-test-volume-")
	v.putObjects(name, newConfigMap(name))
	pod := createProjectedConfigMapMounttestPod(v, "projected-configmap-volume", name, v.p("/etc/projected-configmap-volume"),
		"--file_content="+v.p("/etc/projected-configmap-volume/data-1"), "--file_mode="+v.p("/etc/projected-configmap-volume/data-1"))
	if asUser {
		setPodNonRootUser(pod)
	}
	if fsGroup != 0 {
		pod.Spec.SecurityContext.FSGroup = ptr(fsGroup)
	}
	if defaultMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.DefaultMode = defaultMode
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/projected-configmap-volume/data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/projected-configmap-volume/data-1"), defaultMode),
	})
}

func doProjectedConfigMapE2EWithMappings(v *vol, asUser bool, fsGroup int64, itemMode *int32) {
	name := unique("projected-configmap-test-volume-map-")
	v.putObjects(name, newConfigMap(name))
	pod := createProjectedConfigMapMounttestPod(v, "projected-configmap-volume", name, v.p("/etc/projected-configmap-volume"),
		"--file_content="+v.p("/etc/projected-configmap-volume/path/to/data-2"), "--file_mode="+v.p("/etc/projected-configmap-volume/path/to/data-2"))
	pod.Spec.Volumes[0].VolumeSource.Projected.Sources[0].ConfigMap.Items = []v1.KeyToPath{{Key: "data-2", Path: "path/to/data-2"}}
	if asUser {
		setPodNonRootUser(pod)
	}
	if fsGroup != 0 {
		pod.Spec.SecurityContext.FSGroup = ptr(fsGroup)
	}
	if itemMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.DefaultMode = itemMode // as upstream: the volume's defaultMode
	}
	// Just check file mode if fsGroup is not set. If fsGroup is set, the
	// final mode is adjusted and we are not testing that case.
	output := []string{"content of file \"" + v.p("/etc/projected-configmap-volume/path/to/data-2") + "\": value-2"}
	if fsGroup == 0 {
		output = append(output, getFileModeRegex(v.p("/etc/projected-configmap-volume/path/to/data-2"), itemMode))
	}
	v.output(pod, output)
}

func createProjectedConfigMapMounttestPod(v *vol, volumeName, referenceName, mountPath string, mounttestArgs ...string) *v1.Pod {
	volumes := []v1.Volume{{Name: volumeName, VolumeSource: projectedConfigMap(referenceName, nil)}}
	return v.agnhostPod(unique("pod-projected-configmaps-"), volumes, createMounts(volumeName, mountPath, true), mounttestArgs...)
}

// Projected secret

// "should be consumable from pods in volume [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableFromPodsInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doProjectedSecretE2EWithoutMapping(e.vol(), nil, unique("projected-secret-test-"), nil, nil)
	})
}

// "should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableFromPodsInVolumeWithDefaultModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doProjectedSecretE2EWithoutMapping(e.vol(), ptr(int32(0o400)), unique("projected-secret-test-"), nil, nil)
	})
}

// "should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableFromPodsInVolumeAsNonRootWithDefaultModeAndFSGroupSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doProjectedSecretE2EWithoutMapping(e.vol(), ptr(int32(0o440)), unique("projected-secret-test-"), ptr(int64(1001)), ptr(nonRootTestUserID))
	})
}

// "should be consumable from pods in volume with mappings [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableFromPodsInVolumeWithMappings(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedSecretE2EWithMapping(e.vol(), nil) })
}

// "should be consumable from pods in volume with mappings and Item Mode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableFromPodsInVolumeWithMappingsAndItemModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doProjectedSecretE2EWithMapping(e.vol(), ptr(int32(0o400))) })
}

// "should be able to mount in a volume regardless of a different secret existing with same name in different namespace [NodeConformance]"
func TestProjectedSecret_shouldBeAbleToMountInAVolumeRegardlessOfADifferentSecretExistingWithSameNameInDifferentNamespace(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		secret2Name := unique("projected-secret-test-")
		secret2 := secretForTest("secret-namespace", secret2Name)
		secret2.Data = map[string][]byte{"this_should_not_match_content_of_other_secret": []byte("similarly_this_should_not_match_content_of_other_secret\n")}
		e.putObjects(secret2Name+"-ns2", secret2)
		doProjectedSecretE2EWithoutMapping(e.vol(), nil, secret2Name, nil, nil)
	})
}

// "should be consumable in multiple volumes in a pod [NodeConformance]" (Conformance)
func TestProjectedSecret_shouldBeConsumableInMultipleVolumesInAPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("projected-secret-test-")
		v.putObjects(name, secretForTest("default", name))
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-projected-secrets-")},
			Spec: v1.PodSpec{
				Volumes: []v1.Volume{{Name: "projected-secret-volume", VolumeSource: projectedSecret(name, nil)},
					{Name: "projected-secret-volume-2", VolumeSource: projectedSecret(name, nil)}},
				Containers: []v1.Container{{Name: "secret-volume-test",
					Command: e.mounttest("--file_content="+v.p("/etc/projected-secret-volume/data-1"), "--file_mode="+v.p("/etc/projected-secret-volume/data-1")),
					VolumeMounts: []v1.VolumeMount{{Name: "projected-secret-volume", MountPath: v.p("/etc/projected-secret-volume"), ReadOnly: true},
						{Name: "projected-secret-volume-2", MountPath: v.p("/etc/projected-secret-volume-2"), ReadOnly: true}}}},
				RestartPolicy: v1.RestartPolicyNever,
			}}
		v.output(pod, []string{
			"content of file \"" + v.p("/etc/projected-secret-volume/data-1") + "\": value-1",
			getFileModeRegex(v.p("/etc/projected-secret-volume/data-1"), nil),
		})
	})
}

// "optional updates should be reflected in volume [NodeConformance]" (Conformance)
func TestProjectedSecret_optionalUpdatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		optionalUpdates(e.vol(), optionalCase{
			mountPath: "/etc/projected-secret-volumes", podPrefix: "pod-projected-secrets-",
			del:    optionalObject{"s-test-opt-del-", "dels-volume-test", "deletes-volume"},
			upd:    optionalObject{"s-test-opt-upd-", "upds-volume-test", "updates-volume"},
			cre:    optionalObject{"s-test-opt-create-", "creates-volume-test", "creates-volume"},
			source: func(name string) v1.VolumeSource { return projectedSecret(name, ptr(true)) },
			object: secretOf,
		})
	})
}

// "Should fail non-optional pod creation due to secret object does not exist [Slow]": upstream's
// createNonOptionalSecretPod, a secret volume.
func TestProjectedSecret_shouldFailNonOptionalPodCreationDueToSecretObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, name := createNonOptionalSecretPod(v, v.p("/etc/projected-secret-volumes"), unique("pod-secrets-"), false)
		v.consistentlyPending(pod, `secret "`+name+`" not found`, nonOptionalWindow)
	})
}

// "Should fail non-optional pod creation due to the key in the secret object does not exist [Slow]"
func TestProjectedSecret_shouldFailNonOptionalPodCreationDueToTheKeyInTheSecretObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, _ := createNonOptionalSecretPod(v, v.p("/etc/secret-volumes"), unique("pod-secrets-"), true)
		v.consistentlyPending(pod, "references non-existent secret key: data_4", nonOptionalWindow)
	})
}

func doProjectedSecretE2EWithoutMapping(v *vol, defaultMode *int32, secretName string, fsGroup, uid *int64) {
	v.putObjects(secretName, secretForTest("default", secretName))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-projected-secrets-"), Namespace: "default"},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "projected-secret-volume", VolumeSource: projectedSecret(secretName, nil)}},
			Containers: []v1.Container{{Name: "projected-secret-volume-test",
				Command:      v.mounttest("--file_content="+v.p("/etc/projected-secret-volume/data-1"), "--file_mode="+v.p("/etc/projected-secret-volume/data-1")),
				VolumeMounts: []v1.VolumeMount{{Name: "projected-secret-volume", MountPath: v.p("/etc/projected-secret-volume")}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	if defaultMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.DefaultMode = defaultMode
	}
	if fsGroup != nil || uid != nil {
		pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: fsGroup, RunAsUser: uid}
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/projected-secret-volume/data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/projected-secret-volume/data-1"), defaultMode),
	})
}

func doProjectedSecretE2EWithMapping(v *vol, mode *int32) {
	name := unique("projected-secret-test-map-")
	v.putObjects(name, secretForTest("default", name))
	src := projectedSecret(name, nil)
	src.Projected.Sources[0].Secret.Items = []v1.KeyToPath{{Key: "data-1", Path: "new-path-data-1"}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-projected-secrets-")},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "projected-secret-volume", VolumeSource: src}},
			Containers: []v1.Container{{Name: "projected-secret-volume-test",
				Command:      v.mounttest("--file_content="+v.p("/etc/projected-secret-volume/new-path-data-1"), "--file_mode="+v.p("/etc/projected-secret-volume/new-path-data-1")),
				VolumeMounts: []v1.VolumeMount{{Name: "projected-secret-volume", MountPath: v.p("/etc/projected-secret-volume")}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	if mode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.DefaultMode = mode // as upstream: the volume's defaultMode
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/projected-secret-volume/new-path-data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/projected-secret-volume/new-path-data-1"), mode),
	})
}

// "should project all components that make up the projection API [Projection] [NodeConformance]" (Conformance)
func TestProjectedCombined_shouldProjectAllComponentsThatMakeUpTheProjectionAPI(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		podName := unique("projected-volume-")
		secretName := unique("secret-projected-all-test-volume-")
		configMapName := unique("configmap-projected-all-test-volume-")
		v.putObjects(configMapName, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: configMapName},
			Data: map[string]string{"configmap-data": "configmap-value-1"}})
		v.putObjects(secretName, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: secretName},
			Data: map[string][]byte{"secret-data": []byte("secret-value-1")}})
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName},
			Spec: v1.PodSpec{
				Volumes: []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "podname",
						FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: secretName}}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: configMapName}}},
				}}}}},
				Containers: []v1.Container{{Name: "projected-all-volume-test",
					Command:      []string{"sh", "-c", "cat " + v.p("/all/podname") + " && cat " + v.p("/all/secret-data") + " && cat " + v.p("/all/configmap-data")},
					VolumeMounts: []v1.VolumeMount{{Name: "podinfo", MountPath: v.p("/all"), ReadOnly: false}}}},
				RestartPolicy: v1.RestartPolicyNever,
			}}
		v.outputContains(pod, []string{podName, "secret-value-1", "configmap-value-1"})
	})
}
