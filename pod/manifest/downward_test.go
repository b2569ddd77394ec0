package manifest

import (
	"strings"
	"testing"
)

// The downward API fields and resources the kubelet fills in are accepted
// (node e2e downwardapi.go), for env vars and downwardAPI volume items.
func TestDownwardAPIAccepted(t *testing.T) {
	env := `    env:
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    - {name: HOST_IPS, valueFrom: {fieldRef: {fieldPath: status.hostIPs}}}
    - {name: CPU_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: CPU_MILLI, valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}}
    - {name: MEMORY_MI, valueFrom: {resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}}}
    - {name: STORAGE, valueFrom: {resourceFieldRef: {resource: requests.ephemeral-storage, divisor: 1k}}}
`
	doc := strings.Replace(containerPod, "    volumeMounts:\n", env+"    volumeMounts:\n", 1)
	doc = strings.Replace(doc, "{path: labels, fieldRef: {fieldPath: metadata.labels}}",
		"{path: labels, fieldRef: {fieldPath: metadata.labels}}, {path: cpu_limit, resourceFieldRef: {containerName: app, resource: limits.cpu, divisor: 1m}}", 1)
	pods, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pods[0].Spec.Containers[0].Env); n != 6 {
		t.Fatalf("%d env vars decoded, want 6", n)
	}
}

// Bad resourceFieldRefs get the API server's errors.
func TestResourceFieldRefErrors(t *testing.T) {
	env := func(ref string) string {
		return "    env: [{name: X, valueFrom: {resourceFieldRef: " + ref + "}}]\n    volumeMounts:\n"
	}
	expectDecodeErrors(t, containerPod, []decodeErrorCase{
		{"unknown resource", "    volumeMounts:\n", env("{resource: limits.gpu}"), []string{"spec.containers[0].env[0].valueFrom.resourceFieldRef.resource", "limits.gpu"}},
		{"no resource", "    volumeMounts:\n", env("{containerName: app}"), []string{"spec.containers[0].env[0].valueFrom.resourceFieldRef.resource", "Required"}},
		{"cpu divisor", "    volumeMounts:\n", env("{resource: limits.cpu, divisor: 1Mi}"),
			[]string{"resourceFieldRef.divisor", "only divisor's values 1m and 1 are supported with the cpu resource"}},
		{"memory divisor", "    volumeMounts:\n", env("{resource: requests.memory, divisor: 1m}"),
			[]string{"resourceFieldRef.divisor", "supported with the memory resource"}},
		{"value and valueFrom", "    volumeMounts:\n", "    env: [{name: X, value: v, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}]\n    volumeMounts:\n",
			[]string{"spec.containers[0].env[0].valueFrom", "may not be specified when `value` is not empty"}},
	})
}

// What goes into the hosts file and the termination message settings
// are checked as the API server does.
func TestHostAndTerminationErrors(t *testing.T) {
	expectDecodeErrors(t, containerPod, []decodeErrorCase{
		{"alias with a newline", "  volumes:\n", "  hostAliases: [{ip: 10.0.0.1, hostnames: [\"a\\n10.6.6.6 evil\"]}]\n  volumes:\n",
			[]string{"spec.hostAliases[0].hostnames[0]"}},
		{"alias without an IP", "  volumes:\n", "  hostAliases: [{ip: nope, hostnames: [a]}]\n  volumes:\n", []string{"spec.hostAliases[0].ip"}},
		{"hostname not a label", "  volumes:\n", "  hostname: a.b\n  volumes:\n", []string{"spec.hostname"}},
		{"bad policy", "    image: busybox\n", "    image: busybox\n    terminationMessagePolicy: Always\n", []string{"spec.containers[0].terminationMessagePolicy", "Always"}},
		{"relative path", "    image: busybox\n", "    image: busybox\n    terminationMessagePath: dev/log\n", []string{"spec.containers[0].terminationMessagePath"}},
	})
	doc := strings.Replace(containerPod, "    image: busybox\n", "    image: busybox\n    terminationMessagePath: /dev/termination-custom-log\n    terminationMessagePolicy: FallbackToLogsOnError\n", 1)
	doc = strings.Replace(doc, "  volumes:\n", "  hostAliases: [{ip: 10.0.0.1, hostnames: [db.local, db]}]\n  volumes:\n", 1)
	if _, err := Decode([]byte(doc)); err != nil {
		t.Fatal(err)
	}
}
