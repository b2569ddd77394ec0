package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
)

// objectsPod is a static process pod that writes the variables it got
// from ConfigMaps and Secrets to out, then waits.
func objectsPod(name, out, env string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "echo \"$MODE $DB_password $PW $LEVEL\" > %s.tmp && mv %s.tmp %s; exec sleep 1000"]
%s`, name, out, out, out, env)
}

const localObjects = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  MODE: prod
  LEVEL: "3"
---
apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: s3cret-value
`

// waiting is the container's waiting state, if it waits.
func waiting(p *v1.Pod) *v1.ContainerStateWaiting {
	if len(p.Status.ContainerStatuses) == 0 {
		return nil
	}
	return p.Status.ContainerStatuses[0].State.Waiting
}

// Static pods take their environment from ConfigMaps and Secrets in
// manifest files, as the kubelet makes it; a missing object or key keeps
// the container waiting with the kubelet's reason and message, and the
// object's file starts it.
func TestLocalObjectsEnv(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	d.write("objects.yaml", localObjects)
	out := filepath.Join(d.dir, "env-out")
	d.write("env.yaml", objectsPod("env", out, `    envFrom:
    - configMapRef: {name: app}
    - prefix: DB_
      secretRef: {name: db}
    env:
    - name: PW
      valueFrom: {secretKeyRef: {name: db, key: password}}
    - name: LEVEL
      value: "level-$(LEVEL)"
`))
	got := waitForValue(t, 15*time.Second, "the pod's env written to "+out,
		func() string { b, _ := os.ReadFile(out); return strings.TrimSpace(string(b)) },
		func(s string) bool { return s != "" })
	if want := "prod s3cret-value s3cret-value level-3"; got != want {
		t.Fatalf("env: %q, want %q", got, want)
	}

	// A key the Secret lacks: the kubelet's message.
	d.write("nokey.yaml", objectsPod("nokey", filepath.Join(d.dir, "nokey-out"), `    env:
    - name: PW
      valueFrom: {secretKeyRef: {name: db, key: nokey}}
`))
	d.waitPod("nokey", 15*time.Second, func(p *v1.Pod) bool {
		w := waiting(p)
		return w != nil && w.Reason == "CreateContainerConfigError" && w.Message == "couldn't find key nokey in Secret default/db"
	})

	// A missing ConfigMap: the same in get pod -o json, and the event.
	lateOut := filepath.Join(d.dir, "late-out")
	d.write("late.yaml", objectsPod("late", lateOut, `    envFrom:
    - configMapRef: {name: later}
`))
	d.waitPod("late", 15*time.Second, func(p *v1.Pod) bool { return waiting(p) != nil && waiting(p).Reason == "CreateContainerConfigError" })
	js, _, code := d.cli("get", "pod", "late", "-o", "json")
	var p v1.Pod
	if err := json.Unmarshal([]byte(js), &p); code != 0 || err != nil {
		t.Fatalf("get pod late -o json: exit %d, %v\n%s", code, err, js)
	}
	if w := waiting(&p); w == nil || w.Reason != "CreateContainerConfigError" || w.Message != `configmap "later" not found` {
		t.Fatalf("waiting: %+v", p.Status.ContainerStatuses)
	}
	desc, _, _ := d.cli("describe", "pod", "late")
	if !strings.Contains(desc, `Error: configmap "later" not found`) {
		t.Fatalf("describe shows no Failed event:\n%s", desc)
	}

	// The object's file starts it, without waiting out the backoff
	// (at least the default 10 s, counted from its last failure).
	wrote := time.Now()
	d.write("later.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: later}\ndata: {MODE: late}\n")
	waitForValue(t, 15*time.Second, "the late pod's env written to "+lateOut,
		func() string { b, _ := os.ReadFile(lateOut); return strings.TrimSpace(string(b)) },
		func(s string) bool { return s == "late" })
	// Judged on the daemon's clock, from the last failure (a second one
	// restarts the backoff; this reason records no BackOff event) to the
	// start: the test's polls and the shell's write do not count.
	evs, err := d.client.Events(context.Background(), "default", "late")
	if err != nil {
		t.Fatal(err)
	}
	var failed, started time.Time
	for _, e := range evs {
		switch e.Reason {
		case "Failed":
			failed = e.LastTime
		case "Started":
			started = e.FirstTime
		}
	}
	if failed.IsZero() || started.IsZero() {
		t.Fatalf("the late pod has no Failed or no Started event: %+v", evs)
	}
	t.Logf("started %v after its ConfigMap's file was written, %v after its last failure", started.Sub(wrote), started.Sub(failed))
	if !started.Before(failed.Add(10 * time.Second)) {
		t.Errorf("the pod started at %v, its last failure was at %v: it waited out its 10 s backoff", started, failed)
	}

	// A bad object document is refused with its file and field named.
	d.write("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {\"a b\": x}\n")
	d.waitPod("bad.yaml", 15*time.Second, func(p *v1.Pod) bool {
		return strings.Contains(p.Status.Message, "bad.yaml: configmap \"bad\": data[a b]: Invalid value")
	})

	if strings.Contains(d.log.String(), "s3cret") {
		t.Fatalf("a Secret's value in the daemon's log:\n%s", d.log)
	}
	desc, _, _ = d.cli("describe", "pod", "env")
	if strings.Contains(desc, "s3cret") {
		t.Fatalf("a Secret's value in describe:\n%s", desc)
	}
}

// A containerd pod's ConfigMap volume from a manifest file follows the
// file's edits in place (the kubelet's atomic swap) within 2 s; its
// environment, made at its start, does not change.
func TestLocalObjectsVolumeUpdate(t *testing.T) {
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	site := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: site}\ndata: {greeting: %s}\n"
	d.write("site-objects.yaml", fmt.Sprintf(site, "hello"))
	d.write("site.yaml", `apiVersion: v1
kind: Pod
metadata: {name: site}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: conf, configMap: {name: site}}]
  containers:
  - name: main
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    env: [{name: GREETING, valueFrom: {configMapKeyRef: {name: site, key: greeting}}}]
    volumeMounts: [{name: conf, mountPath: /etc/site}]
`)
	p := d.waitPod("site", 30*time.Second, running)
	read := func(args ...string) func() string {
		return func() string {
			out, _, _ := d.cli(append([]string{"exec", "site", "--"}, args...)...)
			return strings.TrimSpace(out)
		}
	}
	is := func(want string) func(string) bool { return func(s string) bool { return s == want } }
	waitForValue(t, 10*time.Second, "the volume's first content", read("cat", "/etc/site/greeting"), is("hello"))
	onHost := d.volumeFile(p, "conf", "greeting")
	hostValue := func() string { b, _ := os.ReadFile(onHost); return strings.TrimSpace(string(b)) }
	if got := hostValue(); got != "hello" {
		t.Fatalf("%s holds %q, want hello: not the volume the container reads", onHost, got)
	}

	// The 2 s bound is on the daemon's rewrite, read on the host: an
	// exec into the container can take over a second on a busy machine.
	wrote := time.Now()
	d.write("site-objects.yaml", fmt.Sprintf(site, "updated"))
	waitForValue(t, 10*time.Second, "the volume's file rewritten on the host", hostValue, is("updated"))
	took := time.Since(wrote)
	t.Logf("the volume was rewritten %v after the file was written", took)
	if took > 2*time.Second {
		t.Errorf("the volume took %v to follow its ConfigMap's file, more than 2 s", took)
	}
	// In place: the running container reads the same file (no time bound
	// on the exec's own latency).
	waitForValue(t, 10*time.Second, "the container to read the updated volume", read("cat", "/etc/site/greeting"), is("updated"))
	if env := read("sh", "-c", "echo $GREETING")(); env != "hello" {
		t.Errorf("the running container's env changed to %q", env)
	}
	if p := d.waitPod("site", time.Second, running); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the update restarted the container: %s", describePod(p))
	}
	d.remove("site.yaml")
	d.waitGone("site", 30*time.Second)
}

// A static pod pulls with the login of a pull secret its manifest
// directory holds (a kubernetes.io/dockerconfigjson Secret).
func TestLocalPullSecret(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	registry := registrytest.Start(t, "fleet", "s3cret-pull")
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/pushed:1", Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	ref := registry + "/pv/local-secret:1"
	registrytest.PushWithCtr(t, ctrd.Address, archive, "podvisor.test/pushed:1", ref, "fleet:s3cret-pull", "")
	auth := base64.StdEncoding.EncodeToString([]byte("fleet:s3cret-pull"))
	config := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, registry, auth)
	d.write("regcred.yaml", fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: regcred}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '%s'
`, config))
	d.write("private.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: private}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  imagePullSecrets: [{name: regcred}]
  containers:
  - {name: app, image: %s, imagePullPolicy: Always, command: ["sleep", "1000"]}
`, ref))
	d.waitPod("private", 60*time.Second, running)
	if strings.Contains(d.log.String(), "s3cret-pull") || strings.Contains(d.log.String(), auth) {
		t.Fatalf("the pull secret's login in the daemon's log:\n%s", d.log)
	}
	d.remove("private.yaml")
	d.waitGone("private", 30*time.Second)
}
