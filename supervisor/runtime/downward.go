package runtime

import (
	"fmt"
	"math"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ResourceValue is the downward API's value of a resourceFieldRef, as the
// kubelet computes it (pkg/api/v1/resource.ExtractContainerResourceValue
// after MergeContainerResourceLimits): the named container's quantity
// divided by the divisor (default 1), rounded up; an unset or zero cpu,
// memory or ephemeral-storage limit is the node's allocatable amount.
// c is the container asking; fs.ContainerName, when set, names another.
func ResourceValue(fs *v1.ResourceFieldSelector, pod *v1.Pod, c *v1.Container, allocatable v1.ResourceList) (string, error) {
	if fs.ContainerName != "" && fs.ContainerName != c.Name {
		c = findContainer(pod, fs.ContainerName)
		if c == nil {
			return "", fmt.Errorf("resourceFieldRef: container %q not found in pod %s", fs.ContainerName, pod.Name)
		}
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	limits := c.Resources.Limits.DeepCopy()
	if limits == nil {
		limits = v1.ResourceList{}
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := limits[name]; !ok || q.IsZero() {
			if a, ok := allocatable[name]; ok {
				limits[name] = a.DeepCopy()
			}
		}
	}
	requests := c.Resources.Requests
	switch fs.Resource {
	case "limits.cpu":
		return cpuString(limits.Cpu(), divisor), nil
	case "limits.memory":
		return bytesString(limits.Memory(), divisor), nil
	case "limits.ephemeral-storage":
		return bytesString(limits.StorageEphemeral(), divisor), nil
	case "requests.cpu":
		return cpuString(requests.Cpu(), divisor), nil
	case "requests.memory":
		return bytesString(requests.Memory(), divisor), nil
	case "requests.ephemeral-storage":
		return bytesString(requests.StorageEphemeral(), divisor), nil
	}
	return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
}

// cpuString is cpu in divisor units, rounded up (0.25 cores with divisor
// 1 is "1"; with divisor 1m, "250").
func cpuString(q *resource.Quantity, divisor resource.Quantity) string {
	return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10)
}

// bytesString is a byte quantity in divisor units, rounded up.
func bytesString(q *resource.Quantity, divisor resource.Quantity) string {
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10)
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
