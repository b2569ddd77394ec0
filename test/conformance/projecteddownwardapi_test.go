package conformance

// Ported from test/e2e/common/storage/projected_downwardapi.go
// ("Projected downwardAPI"). As upstream, the podname, resource and
// node-allocatable tests use downwardapi_volume.go's helpers, whose pods
// have a plain downwardAPI volume; the mode tests a projected one.

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// "should provide podname only [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvidePodnameOnly(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		podName := unique("downwardapi-volume-")
		v.outputContains(downwardAPIVolumePodForSimpleTest(v, podName, "/etc/podinfo/podname"), []string{fmt.Sprintf("%s\n", podName)})
	})
}

// "should set DefaultMode on files [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldSetDefaultModeOnFiles(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod := projectedDownwardAPIVolumePodForModeTest(v, unique("downwardapi-volume-"), "/etc/podinfo/podname", nil, ptr(int32(0o400)))
		v.outputContains(pod, []string{"mode of file \"" + v.p("/etc/podinfo/podname") + "\": -r--------"})
	})
}

// "should set mode on item file [LinuxOnly] [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldSetModeOnItemFile(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		pod := projectedDownwardAPIVolumePodForModeTest(v, unique("downwardapi-volume-"), "/etc/podinfo/podname", ptr(int32(0o400)), nil)
		v.outputContains(pod, []string{"mode of file \"" + v.p("/etc/podinfo/podname") + "\": -r--------"})
	})
}

// "should provide podname as non-root with fsgroup [LinuxOnly] [NodeFeature:FSGroup]"
func TestProjectedDownwardAPI_shouldProvidePodnameAsNonRootWithFsgroup(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		podName := unique("metadata-volume-")
		pod := downwardAPIVolumePodForSimpleTest(v, podName, "/etc/podinfo/podname")
		pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(1234))}
		setPodNonRootUser(pod)
		v.outputContains(pod, []string{fmt.Sprintf("%s\n", podName)})
	})
}

// "should provide podname as non-root with fsgroup and defaultMode [LinuxOnly] [NodeFeature:FSGroup]"
func TestProjectedDownwardAPI_shouldProvidePodnameAsNonRootWithFsgroupAndDefaultMode(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		// setting fsGroup sets mode to at least 440
		pod := projectedDownwardAPIVolumePodForModeTest(v, unique("metadata-volume-"), "/etc/podinfo/podname", ptr(int32(0o440)), nil)
		pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(1234))}
		setPodNonRootUser(pod)
		v.outputContains(pod, []string{"mode of file \"" + v.p("/etc/podinfo/podname") + "\": -r--r-----"})
	})
}

// "should provide container's cpu limit [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideContainersCpuLimit(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.outputContains(downwardAPIVolumeForContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/cpu_limit"), []string{"2\n"})
	})
}

// "should provide container's memory limit [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideContainersMemoryLimit(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.outputContains(downwardAPIVolumeForContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/memory_limit"), []string{"134217728\n"})
	})
}

// "should provide container's cpu request [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideContainersCpuRequest(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.outputContains(downwardAPIVolumeForContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/cpu_request"), []string{"1\n"})
	})
}

// "should provide container's memory request [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideContainersMemoryRequest(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.outputContains(downwardAPIVolumeForContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/memory_request"), []string{"33554432\n"})
	})
}

// "should provide node allocatable (cpu) as default cpu limit if the limit is not set [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideNodeAllocatableCpuAsDefaultCpuLimitIfTheLimitIsNotSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.output(downwardAPIVolumeForDefaultContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/cpu_limit"), []string{"[1-9]"})
	})
}

// "should provide node allocatable (memory) as default memory limit if the limit is not set [NodeConformance]" (Conformance)
func TestProjectedDownwardAPI_shouldProvideNodeAllocatableMemoryAsDefaultMemoryLimitIfTheLimitIsNotSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		v.output(downwardAPIVolumeForDefaultContainerResources(v, unique("downwardapi-volume-"), "/etc/podinfo/memory_limit"), []string{"[1-9]"})
	})
}

// downwardAPIItems are downwardAPIVolumeBasePod's files.
func downwardAPIItems() []v1.DownwardAPIVolumeFile {
	res := func(path, r string) v1.DownwardAPIVolumeFile {
		return v1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "client-container", Resource: r}}
	}
	return []v1.DownwardAPIVolumeFile{
		{Path: "podname", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}},
		res("cpu_limit", "limits.cpu"), res("cpu_request", "requests.cpu"), res("memory_limit", "limits.memory"), res("memory_request", "requests.memory"),
	}
}

// downwardAPIVolumeBasePod is upstream's (downwardapi_volume.go): a plain
// downwardAPI volume "podinfo".
func downwardAPIVolumeBasePod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			Volumes:       []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: downwardAPIItems()}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
}

// projectedDownwardAPIVolumeBasePod is upstream's: the same files in a
// projected volume.
func projectedDownwardAPIVolumeBasePod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: downwardAPIItems()}}}}}}},
			RestartPolicy: v1.RestartPolicyNever,
		}}
}

func projectedDownwardAPIVolumePodForModeTest(v *vol, name, filePath string, itemMode, defaultMode *int32) *v1.Pod {
	pod := projectedDownwardAPIVolumeBasePod(name)
	pod.Spec.Containers = []v1.Container{{Name: "client-container", Command: v.mounttest("--file_mode=" + v.p(filePath)),
		VolumeMounts: []v1.VolumeMount{{Name: "podinfo", MountPath: v.p("/etc/podinfo")}}}}
	if itemMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.Sources[0].DownwardAPI.Items[0].Mode = itemMode
	}
	if defaultMode != nil {
		pod.Spec.Volumes[0].VolumeSource.Projected.DefaultMode = defaultMode
	}
	return pod
}

func downwardAPIVolumePodForSimpleTest(v *vol, name, filePath string) *v1.Pod {
	pod := downwardAPIVolumeBasePod(name)
	pod.Spec.Containers = []v1.Container{{Name: "client-container", Command: v.mounttest("--file_content=" + v.p(filePath)),
		VolumeMounts: []v1.VolumeMount{{Name: "podinfo", MountPath: v.p("/etc/podinfo"), ReadOnly: false}}}}
	return pod
}

func downwardAPIVolumeForContainerResources(v *vol, name, filePath string) *v1.Pod {
	pod := downwardAPIVolumeBasePod(name)
	pod.Spec.Containers = []v1.Container{{Name: "client-container", Command: v.mounttest("--file_content=" + v.p(filePath)),
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1250m"), v1.ResourceMemory: resource.MustParse("128Mi")}},
		VolumeMounts: []v1.VolumeMount{{Name: "podinfo", MountPath: v.p("/etc/podinfo"), ReadOnly: false}}}}
	return pod
}

func downwardAPIVolumeForDefaultContainerResources(v *vol, name, filePath string) *v1.Pod {
	pod := downwardAPIVolumeBasePod(name)
	pod.Spec.Containers = []v1.Container{{Name: "client-container", Command: v.mounttest("--file_content=" + v.p(filePath)),
		VolumeMounts: []v1.VolumeMount{{Name: "podinfo", MountPath: v.p("/etc/podinfo")}}}}
	return pod
}
