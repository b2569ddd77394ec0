package conformance

// Ported from test/e2e/common/storage/configmap_volume.go ("ConfigMap").
// The ConfigMaps are documents of a manifest file (objects_test.go); the
// pods run the suite's agnhost mounttest. Process pods see their volume
// at the mountPath below a directory of the test's own (vol.p).

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// "should be consumable from pods in volume [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithoutMappings(e.vol(), false, 0, nil) })
}

// "should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolumeWithDefaultModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithoutMappings(e.vol(), false, 0, ptr(int32(0o400))) })
}

// "should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeFeature:FSGroup]"
func TestConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRootWithDefaultModeAndFSGroupSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		doConfigMapE2EWithoutMappings(e.vol(), true, 1001, ptr(int32(0o440))) // setting fsGroup sets mode to at least 440
	})
}

// "should be consumable from pods in volume as non-root [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRoot(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithoutMappings(e.vol(), true, 0, nil) })
}

// "should be consumable from pods in volume as non-root with FSGroup [LinuxOnly] [NodeFeature:FSGroup]"
func TestConfigMap_shouldBeConsumableFromPodsInVolumeAsNonRootWithFSGroup(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithoutMappings(e.vol(), true, 1001, nil) })
}

// "should be consumable from pods in volume with mappings [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolumeWithMappings(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithMappings(e.vol(), false, 0, nil) })
}

// "should be consumable from pods in volume with mappings and Item mode set [LinuxOnly] [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAndItemModeSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithMappings(e.vol(), false, 0, ptr(int32(0o400))) })
}

// "should be consumable from pods in volume with mappings as non-root [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAsNonRoot(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithMappings(e.vol(), true, 0, nil) })
}

// "should be consumable from pods in volume with mappings as non-root with FSGroup [LinuxOnly] [NodeFeature:FSGroup]"
func TestConfigMap_shouldBeConsumableFromPodsInVolumeWithMappingsAsNonRootWithFSGroup(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) { doConfigMapE2EWithMappings(e.vol(), true, 1001, nil) })
}

// "updates should be reflected in volume [NodeConformance]" (Conformance)
func TestConfigMap_updatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("configmap-test-upd-")
		configMap := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"data-1": "value-1"}}
		v.putObjects(name, configMap)
		pod := createConfigMapVolumeMounttestPod(v, "configmap-volume", name, v.p("/etc/configmap-volume"),
			"--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p("/etc/configmap-volume/data-1"))
		v.createSync(pod)
		v.eventuallyLog(pod, pod.Spec.Containers[0].Name, "value-1")

		// Updating configmap
		configMap.Data["data-1"] = "value-2"
		v.putObjects(name, configMap)
		// waiting to observe update in volume
		v.eventuallyLog(pod, pod.Spec.Containers[0].Name, "value-2")
	})
}

// "binary data should be reflected in volume [NodeConformance]" (Conformance)
func TestConfigMap_binaryDataShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("configmap-test-upd-")
		volumeName, volumeMountPath := "configmap-volume", v.p("/etc/configmap-volume")
		v.putObjects(name, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Data:       map[string]string{"data-1": "value-1"},
			BinaryData: map[string][]byte{"dump.bin": {0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff}}})
		pod := createConfigMapVolumeMounttestPod(v, volumeName, name, volumeMountPath,
			"--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p("/etc/configmap-volume/data-1"))
		hexdump := []string{"hexdump", "-C", v.p("/etc/configmap-volume/dump.bin")}
		if e.process() {
			hexdump = append([]string{"busybox"}, hexdump...)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "configmap-volume-binary-test", Command: hexdump,
			VolumeMounts: []v1.VolumeMount{{Name: volumeName, MountPath: volumeMountPath, ReadOnly: true}}})
		v.create(pod)
		// WaitForPodNameRunningInNamespace: the hexdump container may
		// have exited already (Running holds while the other runs).
		got := v.waitPod(pod.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		pod.Namespace = got.Namespace
		// Waiting for pod with text data
		v.eventuallyLog(pod, pod.Spec.Containers[0].Name, "value-1")
		// Waiting for pod with binary data
		v.eventuallyLog(pod, pod.Spec.Containers[1].Name, "de ca fe ba d0 fe ff")
	})
}

// "optional updates should be reflected in volume [NodeConformance]" (Conformance)
func TestConfigMap_optionalUpdatesShouldBeReflectedInVolume(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		optionalUpdates(e.vol(), optionalCase{
			mountPath: "/etc/configmap-volumes", podPrefix: "pod-configmaps-",
			del: optionalObject{"cm-test-opt-del-", "delcm-volume-test", "deletecm-volume"},
			upd: optionalObject{"cm-test-opt-upd-", "updcm-volume-test", "updatecm-volume"},
			cre: optionalObject{"cm-test-opt-create-", "createcm-volume-test", "createcm-volume"},
			source: func(name string) v1.VolumeSource {
				return v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr(true)}}
			},
			object: func(name string, data map[string]string) any {
				return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: data}
			},
		})
	})
}

// "should be consumable in multiple volumes in the same pod [NodeConformance]" (Conformance)
func TestConfigMap_shouldBeConsumableInMultipleVolumesInTheSamePod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		name := unique("configmap-test-volume-")
		v.putObjects(name, newConfigMap(name))
		src := v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique("pod-configmaps-")},
			Spec: v1.PodSpec{
				Volumes: []v1.Volume{{Name: "configmap-volume", VolumeSource: src}, {Name: "configmap-volume-2", VolumeSource: src}},
				Containers: []v1.Container{{Name: "configmap-volume-test", Command: e.mounttest("--file_content=" + v.p("/etc/configmap-volume/data-1")),
					VolumeMounts: []v1.VolumeMount{{Name: "configmap-volume", MountPath: v.p("/etc/configmap-volume"), ReadOnly: true},
						{Name: "configmap-volume-2", MountPath: v.p("/etc/configmap-volume-2"), ReadOnly: true}}}},
				RestartPolicy: v1.RestartPolicyNever,
			}}
		v.outputContains(pod, []string{"content of file \"" + v.p("/etc/configmap-volume/data-1") + "\": value-1"})
	})
}

// "should be immutable if `immutable` field is set" (Conformance). The
// API server's update is objects.ValidateConfigMapUpdate (what podhub
// apply checks); upstream's "Invalid" is a non-empty error list.
func TestConfigMap_shouldBeImmutableIfImmutableFieldIsSet(t *testing.T) {
	t.Parallel()
	update := func(cur *v1.ConfigMap, change func(*v1.ConfigMap)) (*v1.ConfigMap, error) {
		next := cur.DeepCopy()
		change(next)
		if errs := objects.ValidateConfigMapUpdate(next, cur); len(errs) > 0 {
			return cur, errs.ToAggregate()
		}
		return next, nil
	}
	current := newConfigMap("immutable")
	current.UID, current.ResourceVersion = "c6b4f1f4-0000-4000-8000-000000000001", "1"
	if errs := objects.ValidateConfigMap(current); len(errs) > 0 {
		t.Fatalf("Failed to create config map: %v", errs)
	}
	var err error
	if current, err = update(current, func(c *v1.ConfigMap) { c.Data["data-4"] = "value-4" }); err != nil {
		t.Fatalf("Failed to update config map: %v", err)
	}
	// Mark config map as immutable.
	if current, err = update(current, func(c *v1.ConfigMap) { c.Immutable = ptr(true) }); err != nil {
		t.Fatalf("Failed to mark config map as immutable: %v", err)
	}
	// Ensure data can't be changed now.
	if _, err = update(current, func(c *v1.ConfigMap) { c.Data["data-5"] = "value-5" }); err == nil {
		t.Fatalf("expected 'invalid' as error, got instead: %v", err)
	}
	// Ensure config map can't be switched from immutable to mutable.
	if !*current.Immutable {
		t.Fatalf("currentConfigMap %s can be switched from immutable to mutable", current.Name)
	}
	if _, err = update(current, func(c *v1.ConfigMap) { c.Immutable = ptr(false) }); err == nil {
		t.Fatalf("expected 'invalid' as error, got instead: %v", err)
	}
	// Ensure that metadata can be changed.
	if _, err = update(current, func(c *v1.ConfigMap) { c.Labels = map[string]string{"label1": "value1"} }); err != nil {
		t.Fatalf("Failed to update config map: %v", err)
	}
	// Ensure that immutable config map can be deleted: there is no check
	// on deletion to port.
}

// "Should fail non-optional pod creation due to configMap object does not exist [Slow]"
func TestConfigMap_shouldFailNonOptionalPodCreationDueToConfigMapObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, name := createNonOptionalConfigMapPod(v, v.p("/etc/configmap-volumes"), false)
		v.consistentlyPending(pod, `configmap "`+name+`" not found`, nonOptionalWindow)
	})
}

// "Should fail non-optional pod creation due to the key in the configMap object does not exist [Slow]"
func TestConfigMap_shouldFailNonOptionalPodCreationDueToTheKeyInTheConfigMapObjectDoesNotExist(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod, _ := createNonOptionalConfigMapPod(v, v.p("/etc/configmap-volumes"), true)
		v.consistentlyPending(pod, "configmap references non-existent config key: data-4", nonOptionalWindow)
	})
}

// nonOptionalWindow is how long the non-optional tests see the pod stay
// Pending (upstream: the 5 min pod start timeout).
const nonOptionalWindow = 5 * time.Second

func doConfigMapE2EWithoutMappings(v *vol, asUser bool, fsGroup int64, defaultMode *int32) {
	name := unique("configmap-test-volume-")
	v.putObjects(name, newConfigMap(name))
	pod := createConfigMapVolumeMounttestPod(v, "configmap-volume", name, v.p("/etc/configmap-volume"),
		"--file_content="+v.p("/etc/configmap-volume/data-1"), "--file_mode="+v.p("/etc/configmap-volume/data-1"))
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(1))
	if asUser {
		setPodNonRootUser(pod)
	}
	if fsGroup != 0 {
		pod.Spec.SecurityContext.FSGroup = ptr(fsGroup)
	}
	if defaultMode != nil {
		pod.Spec.Volumes[0].VolumeSource.ConfigMap.DefaultMode = defaultMode
	}
	v.output(pod, []string{
		"content of file \"" + v.p("/etc/configmap-volume/data-1") + "\": value-1",
		getFileModeRegex(v.p("/etc/configmap-volume/data-1"), defaultMode),
	})
}

func doConfigMapE2EWithMappings(v *vol, asUser bool, fsGroup int64, itemMode *int32) {
	name := unique("configmap-test-volume-map-")
	v.putObjects(name, newConfigMap(name))
	pod := createConfigMapVolumeMounttestPod(v, "configmap-volume", name, v.p("/etc/configmap-volume"),
		"--file_content="+v.p("/etc/configmap-volume/path/to/data-2"), "--file_mode="+v.p("/etc/configmap-volume/path/to/data-2"))
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(1))
	pod.Spec.Volumes[0].VolumeSource.ConfigMap.Items = []v1.KeyToPath{{Key: "data-2", Path: "path/to/data-2"}}
	if asUser {
		setPodNonRootUser(pod)
	}
	if fsGroup != 0 {
		pod.Spec.SecurityContext.FSGroup = ptr(fsGroup)
	}
	if itemMode != nil {
		pod.Spec.Volumes[0].VolumeSource.ConfigMap.Items[0].Mode = itemMode
	}
	// Just check file mode if fsGroup is not set. If fsGroup is set, the
	// final mode is adjusted and we are not testing that case.
	output := []string{"content of file \"" + v.p("/etc/configmap-volume/path/to/data-2") + "\": value-2"}
	if fsGroup == 0 {
		output = append(output, getFileModeRegex(v.p("/etc/configmap-volume/path/to/data-2"), itemMode))
	}
	v.output(pod, output)
}

// createNonOptionalConfigMapPod is upstream's createNonOptionalConfigMapPod
// or, withConfig, createNonOptionalConfigMapPodWithConfig (the ConfigMap
// exists; the item's key data-4 does not). It returns the pod and the
// ConfigMap's name.
func createNonOptionalConfigMapPod(v *vol, volumeMountPath string, withConfig bool) (*v1.Pod, string) {
	createName := unique("cm-test-opt-create-")
	if withConfig {
		v.putObjects(createName, newConfigMap(createName))
	}
	pod := createConfigMapVolumeMounttestPod(v, "createcm-volume", createName, volumeMountPath+"/create",
		"--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p("/etc/configmap-volumes/create/data-1"))
	pod.Spec.Volumes[0].VolumeSource.ConfigMap.Optional = ptr(false)
	if withConfig {
		pod.Spec.Volumes[0].VolumeSource.ConfigMap.Items = []v1.KeyToPath{{Key: "data-4", Path: "path/to/data-4"}}
	}
	v.create(pod)
	return pod, createName
}

func createConfigMapVolumeMounttestPod(v *vol, volumeName, referenceName, mountPath string, mounttestArgs ...string) *v1.Pod {
	volumes := []v1.Volume{{Name: volumeName, VolumeSource: v1.VolumeSource{
		ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: referenceName}}}}}
	return v.agnhostPod(unique("pod-configmaps-"), volumes, createMounts(volumeName, mountPath, true), mounttestArgs...)
}

// optionalObject is one of the optional-updates test's three: the
// object's name prefix, its container and its volume.
type optionalObject struct{ prefix, container, volume string }

// optionalCase is the "optional updates should be reflected in volume"
// test of one volume kind, as upstream writes it four times.
type optionalCase struct {
	mountPath, podPrefix string
	del, upd, cre        optionalObject
	source               func(name string) v1.VolumeSource
	object               func(name string, data map[string]string) any
}

func optionalUpdates(v *vol, c optionalCase) {
	deleteName, updateName, createName := unique(c.del.prefix), unique(c.upd.prefix), unique(c.cre.prefix)
	v.putObjects(deleteName, c.object(deleteName, map[string]string{"data-1": "value-1"}))
	v.putObjects(updateName, c.object(updateName, map[string]string{"data-1": "value-1"}))
	container := func(o optionalObject, sub, file string) v1.Container {
		return v1.Container{Name: o.container,
			Command:      v.mounttest("--break_on_expected_content=false", mounttestRetry, "--file_content_in_loop="+v.p(c.mountPath+"/"+sub+"/"+file)),
			VolumeMounts: []v1.VolumeMount{{Name: o.volume, MountPath: v.p(c.mountPath + "/" + sub), ReadOnly: true}}}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: unique(c.podPrefix)},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: c.del.volume, VolumeSource: c.source(deleteName)},
				{Name: c.upd.volume, VolumeSource: c.source(updateName)}, {Name: c.cre.volume, VolumeSource: c.source(createName)}},
			Containers:    []v1.Container{container(c.del, "delete", "data-1"), container(c.upd, "update", "data-3"), container(c.cre, "create", "data-1")},
			RestartPolicy: v1.RestartPolicyNever,
		}}
	v.createSync(pod)
	v.eventuallyLog(pod, c.cre.container, "Error reading file "+v.p(c.mountPath+"/create/data-1"))
	v.eventuallyLog(pod, c.upd.container, "Error reading file "+v.p(c.mountPath+"/update/data-3"))
	v.eventuallyLog(pod, c.del.container, "value-1")

	// Deleting the first, updating the second (data-1 gone, data-3
	// added), creating the third.
	v.deleteObjects(deleteName)
	v.putObjects(updateName, c.object(updateName, map[string]string{"data-3": "value-3"}))
	v.putObjects(createName, c.object(createName, map[string]string{"data-1": "value-1"}))

	// waiting to observe update in volume
	v.eventuallyLog(pod, c.cre.container, "value-1")
	v.eventuallyLog(pod, c.upd.container, "value-3")
	v.eventuallyLog(pod, c.del.container, "Error reading file "+v.p(c.mountPath+"/delete/data-1"))
}
