package manifest

import (
	"strings"
	"testing"
)

const containerPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  volumes:
  - name: data
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
  - name: host
    hostPath: {path: /var/lib/web, type: DirectoryOrCreate}
  - name: info
    projected: {sources: [{downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}]}
  containers:
  - name: app
    image: busybox
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: host, mountPath: /host, readOnly: true}
    - {name: info, mountPath: /etc/podinfo}
`

// A name with two dots is a name, not a step up: Kubernetes accepts it.
func TestSubPathWithDotsInAName(t *testing.T) {
	doc := strings.Replace(containerPod, "mountPath: /data}", "mountPath: /data, subPath: a..b/c}", 1)
	if _, err := Decode([]byte(doc)); err != nil {
		t.Fatal(err)
	}
}

func TestVolumesAccepted(t *testing.T) {
	pods, err := Decode([]byte(containerPod))
	if err != nil {
		t.Fatal(err)
	}
	if len(pods[0].Spec.Volumes) != 3 {
		t.Fatalf("volumes %+v", pods[0].Spec.Volumes)
	}
}

func TestVolumeErrorsNameTheField(t *testing.T) {
	expectDecodeErrors(t, containerPod, []decodeErrorCase{
		{"configMap", "    emptyDir: {medium: Memory, sizeLimit: 16Mi}", "    configMap: {name: cfg}", []string{"spec.volumes[0]", "configMap volumes are not available to static pods"}},
		{"secret", "    emptyDir: {medium: Memory, sizeLimit: 16Mi}", "    secret: {secretName: s}", []string{"spec.volumes[0]", "secret volumes"}},
		{"projected secret", "[{downwardAPI:", "[{secret: {name: s}}, {downwardAPI:", []string{"spec.volumes[2].projected.sources[0]", "only downwardAPI"}},
		{"relative hostPath", "path: /var/lib/web", "path: var/lib/web", []string{"spec.volumes[1].hostPath.path", "absolute"}},
		{"bad hostPath type", "type: DirectoryOrCreate", "type: Folder", []string{"spec.volumes[1].hostPath.type", "Folder"}},
		{"bad medium", "medium: Memory", "medium: HugePages", []string{"spec.volumes[0].emptyDir.medium"}},
		{"unknown volume", "{name: data, mountPath: /data}", "{name: nope, mountPath: /data}", []string{"spec.containers[0].volumeMounts[0].name", "nope"}},
		{"relative mount", "mountPath: /data}", "mountPath: data}", []string{"spec.containers[0].volumeMounts[0].mountPath"}},
		{"escaping subPath", "mountPath: /data}", "mountPath: /data, subPath: ../x}", []string{"spec.containers[0].volumeMounts[0].subPath", "must not contain '..'"}},
		{"absolute subPath", "mountPath: /data}", "mountPath: /data, subPath: /x}", []string{"spec.containers[0].volumeMounts[0].subPath", "must be a relative path"}},
		{"escaping item path", "path: labels", "path: a/../../x", []string{"spec.volumes[2].projected.sources[0].downwardAPI.items[0].path", "'..'"}},
		{"localhost seccomp without a profile", "    volumeMounts:", "    securityContext: {seccompProfile: {type: Localhost}}\n    volumeMounts:",
			[]string{"spec.containers[0].securityContext.seccompProfile.localhostProfile", "must be set"}},
		{"localhost seccomp escaping", "  containers:", "  securityContext: {seccompProfile: {type: Localhost, localhostProfile: ../x.json}}\n  containers:",
			[]string{"spec.securityContext.seccompProfile.localhostProfile", "'..'"}},
		{"profile for another type", "    volumeMounts:", "    securityContext: {seccompProfile: {type: RuntimeDefault, localhostProfile: x.json}}\n    volumeMounts:",
			[]string{"spec.containers[0].securityContext.seccompProfile.localhostProfile", "only be set when seccomp type is Localhost"}},
		{"bad seccomp type", "    volumeMounts:", "    securityContext: {seccompProfile: {type: Strict}}\n    volumeMounts:",
			[]string{"spec.containers[0].securityContext.seccompProfile.type", "Strict"}},
		{"duplicate volume", "  - name: host\n", "  - name: data\n", []string{"spec.volumes[1].name", "Duplicate"}},
		{"shared and host PID namespace", "  containers:", "  shareProcessNamespace: true\n  hostPID: true\n  containers:", []string{"spec.shareProcessNamespace", "HostPID"}},
		{"resource field without a container", "fieldRef: {fieldPath: metadata.labels}", "resourceFieldRef: {resource: limits.cpu}",
			[]string{"spec.volumes[2].projected.sources[0].downwardAPI.items[0].resourceFieldRef.containerName", "Required"}},
		{"resource field and field ref", "fieldRef: {fieldPath: metadata.labels}", "fieldRef: {fieldPath: metadata.labels}, resourceFieldRef: {containerName: app, resource: limits.cpu}",
			[]string{"spec.volumes[2].projected.sources[0].downwardAPI.items[0]", "can not be specified simultaneously"}},
	})
}

func TestProcessPodsTakeNoVolumes(t *testing.T) {
	doc := strings.Replace(goodPod, "  containers:", "  volumes: [{name: v, emptyDir: {}}]\n  containers:", 1)
	_, err := Decode([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[0]") || !strings.Contains(err.Error(), "process pods") {
		t.Fatalf("error %v, want a process-pod volume refusal", err)
	}
}
