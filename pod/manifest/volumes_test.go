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
		{"nfs", "    emptyDir: {medium: Memory, sizeLimit: 16Mi}", "    nfs: {server: s, path: /x}", []string{"spec.volumes[0]", "nfs volumes are not available"}},
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

// Process pods take every volume a containerd pod may, bound at
// mountPath in their own mount namespace; hostPath alone is refused.
func TestProcessPodVolumes(t *testing.T) {
	doc := strings.Replace(goodPod, "  containers:", `  volumes:
  - {name: v, emptyDir: {}}
  - {name: info, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}
  - name: proj
    projected: {sources: [{downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}}]}
  - {name: cfg, configMap: {name: app}}
  - {name: creds, secret: {secretName: db}}
  containers:`, 1)
	doc = strings.Replace(doc, "    resources:", `    volumeMounts:
    - {name: v, mountPath: /srv/data}
    - {name: info, mountPath: /etc/podinfo, readOnly: true}
    - {name: proj, mountPath: /etc/podproj, subPath: name}
    - {name: cfg, mountPath: /etc/app}
    - {name: creds, mountPath: /etc/app.key, subPath: key}
    resources:`, 1)
	if _, err := Decode([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	host := strings.Replace(goodPod, "  containers:", "  volumes: [{name: v, hostPath: {path: /var/lib/app}}]\n  containers:", 1)
	_, err := Decode([]byte(host))
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[0].hostPath") || !strings.Contains(err.Error(), "reaches host paths directly") {
		t.Fatalf("error %v, want a process-pod hostPath refusal", err)
	}
}

const objectPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  volumes:
  - name: cfg
    configMap: {name: app, defaultMode: 0440, items: [{key: a, path: x/a, mode: 0400}]}
  - name: sec
    secret: {secretName: db, optional: true}
  - name: all
    projected:
      defaultMode: 0600
      sources:
      - configMap: {name: app, items: [{key: a, path: a}]}
      - secret: {name: db, items: [{key: b, path: b}]}
      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}, mode: 0444}]}
  containers:
  - name: app
    image: busybox
    volumeMounts:
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec}
    - {name: all, mountPath: /all, subPath: a}
`

func TestObjectVolumesAccepted(t *testing.T) {
	pods, err := Decode([]byte(objectPod))
	if err != nil {
		t.Fatal(err)
	}
	if v := pods[0].Spec.Volumes; len(v) != 3 || v[0].ConfigMap == nil || v[1].Secret == nil || len(v[2].Projected.Sources) != 3 {
		t.Fatalf("volumes %+v", v)
	}
}

// The API server's fields and words for object volumes.
func TestObjectVolumeErrors(t *testing.T) {
	modeMsg := "must be a number between 0 and 0777 (octal), both inclusive"
	expectDecodeErrors(t, objectPod, []decodeErrorCase{
		{"configMap without a name", "configMap: {name: app, defaultMode", "configMap: {defaultMode", []string{"spec.volumes[0].configMap.name: Required value"}},
		{"secret without a name", "secret: {secretName: db, ", "secret: {", []string{"spec.volumes[1].secret.secretName: Required value"}},
		{"defaultMode too big", "defaultMode: 0440", "defaultMode: 01000", []string{"spec.volumes[0].configMap.defaultMode: Invalid value: 512: " + modeMsg}},
		{"negative mode", "mode: 0400", "mode: -1", []string{"spec.volumes[0].configMap.items[0].mode: Invalid value: -1: " + modeMsg}},
		{"item without a key", "{key: a, path: x/a", "{path: x/a", []string{"spec.volumes[0].configMap.items[0].key: Required value"}},
		{"item without a path", "{key: a, path: x/a, mode: 0400}", "{key: a}", []string{"spec.volumes[0].configMap.items[0].path: Required value"}},
		{"item escaping", "path: x/a,", "path: x/../../a,", []string{"spec.volumes[0].configMap.items[0].path", "must not contain '..'"}},
		{"item absolute", "path: x/a,", "path: /a,", []string{"spec.volumes[0].configMap.items[0].path", "must be a relative path"}},
		{"item reserved", "path: x/a,", "path: ..data,", []string{"spec.volumes[0].configMap.items[0].path", "must not start with '..'"}},
		{"projected defaultMode", "defaultMode: 0600", "defaultMode: 01777", []string{"spec.volumes[2].projected.defaultMode", modeMsg}},
		{"projected duplicate path", "{key: b, path: b}", "{key: b, path: a}", []string{"spec.volumes[2].projected: Invalid value: \"db\": conflicting duplicate paths"}},
		{"projected duplicate downward path", "{path: name, fieldRef", "{path: a, fieldRef", []string{"spec.volumes[2].projected: Invalid value: \"a\": conflicting duplicate paths"}},
		{"projected source name", "- secret: {name: db, items", "- secret: {items", []string{"spec.volumes[2].projected.sources[1].secret.name: Required value"}},
		{"projected downward mode", "mode: 0444}", "mode: 01000}", []string{"spec.volumes[2].projected.sources[2].downwardAPI.items[0].mode", modeMsg}},
		{"two kinds in a source", "- secret: {name: db, items: [{key: b, path: b}]}", "- {secret: {name: db}, configMap: {name: x}}", []string{"spec.volumes[2].projected.sources[1]: Forbidden: may not specify more than 1 volume type"}},
		{"service account token", "- secret: {name: db, items: [{key: b, path: b}]}", "- serviceAccountToken: {path: token}", []string{"spec.volumes[2].projected.sources[1].serviceAccountToken: Forbidden", "service account tokens"}},
		{"cluster trust bundle", "- secret: {name: db, items: [{key: b, path: b}]}", "- clusterTrustBundle: {name: x, path: ca}", []string{"spec.volumes[2].projected.sources[1].clusterTrustBundle: Forbidden", "ClusterTrustBundles"}},
	})
}
