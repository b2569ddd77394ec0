package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A process pod's volumes (emptyDir, downwardAPI, configMap, secret, and
// a configMap key through subPath over a host file) are bound at their
// mountPaths (paths that exist on the host) in a mount namespace of the
// container's own:
// the container, "podvisor exec" and an exec readiness probe see them;
// the host sees neither the files nor the mounts, before or after the pod.
// A pod whose mountPath is missing waits Pending, saying which, until the
// path is made.
func TestProcessPodVolumes(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	killContainersAtCleanup(t, d)
	host := t.TempDir() // the host's directories the volumes go over
	app, info, conf, creds := filepath.Join(host, "app"), filepath.Join(host, "podinfo"), filepath.Join(host, "conf"), filepath.Join(host, "creds")
	for _, dir := range []string{app, info, conf, creds} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostFile := filepath.Join(host, "app.conf") // a subPath file goes over it
	if err := os.WriteFile(hostFile, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := mountsUnder(t, host)
	d.write("objects.yaml", objectsYAML)
	d.write("vols.yaml", `apiVersion: v1
kind: Pod
metadata: {name: vols, labels: {tier: edge}}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: info, downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}}
  - {name: cfg, configMap: {name: cfg}}
  - {name: creds, secret: {secretName: creds}}
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "echo made > `+app+`/made; echo $(cat `+info+`/name) $(cat `+conf+`/app.conf) $(cat `+creds+`/token) $(cat `+hostFile+`); if touch `+info+`/x 2>/dev/null; then echo writable; fi; exec sleep 1000"]
    readinessProbe:
      exec: {command: ["test", "-f", "`+app+`/made"]}
      periodSeconds: 1
    volumeMounts:
    - {name: scratch, mountPath: `+app+`}
    - {name: info, mountPath: `+info+`}
    - {name: cfg, mountPath: `+conf+`}
    - {name: creds, mountPath: `+creds+`}
    - {name: cfg, mountPath: `+hostFile+`, subPath: app.conf}
`)
	d.waitPod("vols", 20*time.Second, func(p *v1.Pod) bool { return initCond(p, v1.PodReady) })
	waitForLong(t, 10*time.Second, "the container's output", func() bool {
		out, _, _ := d.cli("logs", "vols")
		return out == "vols level=3 t0ken level=3\n" // no "writable": the downwardAPI volume is read-only
	})
	if out, errOut, code := d.cli("exec", "vols", "--", "cat", filepath.Join(app, "made"), filepath.Join(info, "name")); code != 0 || out != "made\nvols" {
		t.Fatalf("exec sees %q (%s, exit %d), want the container's files", out, errOut, code)
	}
	if exists(filepath.Join(app, "made")) || exists(filepath.Join(info, "name")) || exists(filepath.Join(conf, "app.conf")) ||
		exists(filepath.Join(creds, "token")) || readLines(hostFile)[0] != "host" {
		t.Fatal("the container's volumes show on the host")
	}
	if got := mountsUnder(t, host); len(got) != len(before) {
		t.Fatalf("the host's mount table holds %v, want %v", got, before)
	}

	// A ConfigMap's change reaches the container's mount (the atomic
	// swap happens in the volume it binds); its subPath does not change.
	d.write("objects.yaml", strings.Replace(objectsYAML, "level=3", "level=4", 1))
	waitForLong(t, 10*time.Second, "the ConfigMap's change in the container's view", func() bool {
		out, _, _ := d.cli("exec", "vols", "--", "cat", filepath.Join(conf, "app.conf"), hostFile)
		return out == "level=4level=3"
	})

	missing := filepath.Join(host, "missing", "conf")
	d.write("nodir.yaml", `apiVersion: v1
kind: Pod
metadata: {name: nodir}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  volumes: [{name: cfg, emptyDir: {}}]
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    volumeMounts: [{name: cfg, mountPath: `+missing+`}]
`)
	p := d.waitPod("nodir", 20*time.Second, func(p *v1.Pod) bool { return p.Status.Reason != "" })
	if p.Status.Phase != v1.PodPending || p.Status.Reason != "MountPathMissing" ||
		!strings.Contains(p.Status.Message, `container "main": volumeMount "cfg": mountPath `+missing+" does not exist on the host") {
		t.Fatalf("a missing mountPath: %s", describePod(p))
	}
	if exists(filepath.Join(host, "missing")) {
		t.Fatal("the missing mountPath was made on the host")
	}
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	d.waitPod("nodir", 30*time.Second, running) // admission asks again every 10 s

	d.remove("vols.yaml")
	d.remove("nodir.yaml")
	d.remove("objects.yaml")
	d.waitGone("vols", 20*time.Second)
	d.waitGone("nodir", 20*time.Second)
	if got := mountsUnder(t, host); len(got) != len(before) {
		t.Fatalf("after the pods the host's mount table holds %v, want %v", got, before)
	}
	waitForLong(t, 10*time.Second, "the pods' directories to go", func() bool {
		entries, _ := os.ReadDir(filepath.Join(d.data, "pods"))
		return len(entries) == 0
	})
	requireNothingMounted(t, d)
}

const objectsYAML = `apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {app.conf: "level=3"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: t0ken}
`
