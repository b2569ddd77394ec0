package podfs

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// downwardValue is the content of one downwardAPI volume item.
func downwardValue(it v1.DownwardAPIVolumeFile, pod *v1.Pod, node runtime.PodEnv) (string, error) {
	switch {
	case it.ResourceFieldRef != nil:
		// A volume's item names its container (validation requires it).
		return runtime.ResourceValue(it.ResourceFieldRef, pod, &v1.Container{}, node.Allocatable)
	case it.FieldRef == nil:
		return "", fmt.Errorf("a fieldRef or resourceFieldRef is required")
	case it.FieldRef.FieldPath == "metadata.labels":
		return formatMap(pod.Labels), nil
	case it.FieldRef.FieldPath == "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	return runtime.FieldValue(pod, it.FieldRef.FieldPath, node)
}

// formatMap is the downward API's key="value" lines, sorted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}
