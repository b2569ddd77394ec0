package manifest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const goodPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sleep", "1000"]
    resources:
      limits: {memory: 64Mi}
`

func TestDecodeAppliesDefaults(t *testing.T) {
	pods, err := Decode([]byte(goodPod))
	if err != nil {
		t.Fatal(err)
	}
	p := pods[0]
	c := p.Spec.Containers[0]
	switch {
	case p.Namespace != "default":
		t.Errorf("namespace = %q", p.Namespace)
	case p.Spec.RestartPolicy != v1.RestartPolicyAlways:
		t.Errorf("restartPolicy = %q", p.Spec.RestartPolicy)
	case *p.Spec.TerminationGracePeriodSeconds != 30:
		t.Errorf("grace = %d", *p.Spec.TerminationGracePeriodSeconds)
	case c.ImagePullPolicy != v1.PullAlways: // "host" has no tag, like :latest
		t.Errorf("pull policy = %q", c.ImagePullPolicy)
	case c.TerminationMessagePath != "/dev/termination-log":
		t.Errorf("termination message path = %q", c.TerminationMessagePath)
	case c.Resources.Requests.Memory().String() != "64Mi":
		t.Errorf("memory request not defaulted from limit: %v", c.Resources.Requests)
	}
}

func TestProbeDefaults(t *testing.T) {
	doc := strings.Replace(goodPod, "    resources:", `    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {port: http}
    resources:`, 1)
	pods, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	pr := pods[0].Spec.Containers[0].ReadinessProbe
	if pr.PeriodSeconds != 10 || pr.TimeoutSeconds != 1 || pr.SuccessThreshold != 1 ||
		pr.FailureThreshold != 3 || pr.HTTPGet.Path != "/" || pr.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Fatalf("probe defaults: %+v", pr)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	cases := []decodeErrorCase{
		{"unknown field", "    image: host", "    image: host\n    imagee: x", []string{`pod "web"`, `spec.containers[0].imagee`}},
		{"wrong type", `command: ["sleep", "1000"]`, "command: 5", []string{`pod "web"`, "spec.containers.command"}},
		{"invalid pod name", "name: web", "name: Web_1", []string{"metadata.name", "Web_1"}},
		{"invalid container name", "- name: app", "- name: App", []string{"spec.containers[0].name"}},
		{"duplicate container", "  containers:\n", "  containers:\n  - {name: app, image: host, command: [\"true\"]}\n", []string{"spec.containers[1].name", "Duplicate"}},
		{"bad quantity", "memory: 64Mi", "memory: 64MiB", []string{`pod "web"`, "spec.containers[0].resources.limits[memory]", "64MiB"}},
		{"request over limit", "limits: {memory: 64Mi}", "limits: {memory: 64Mi}\n      requests: {memory: 1Gi}", []string{"spec.containers[0].resources.requests[memory]"}},
		{"bad restart policy", "  containers:", "  restartPolicy: Sometimes\n  containers:", []string{"spec.restartPolicy", "Sometimes"}},
		{"no command for process", `    command: ["sleep", "1000"]` + "\n", "", []string{"spec.containers[0].command"}},
		{"wrong kind", "kind: Pod", "kind: Deployment", []string{"kind", "Deployment"}},
		{"duplicate key", "  name: web\n", "  name: web\n  name: web2\n", []string{"name"}},
		{"secret env bad key", "    image: host", "    image: host\n    env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: \"a b\"}}}]", []string{"spec.containers[0].env[0].valueFrom.secretKeyRef.key", `"a b"`}},
		{"configmap env no name", "    image: host", "    image: host\n    env: [{name: A, valueFrom: {configMapKeyRef: {key: k}}}]", []string{"spec.containers[0].env[0].valueFrom.configMapKeyRef.name", "Required"}},
		{"envFrom bad prefix", "    image: host", "    image: host\n    envFrom: [{prefix: \"A=\", configMapRef: {name: c}}]", []string{"spec.containers[0].envFrom[0].prefix", `"A="`}},
		{"envFrom two sources", "    image: host", "    image: host\n    envFrom: [{configMapRef: {name: c}, secretRef: {name: s}}]", []string{"spec.containers[0].envFrom", "more than one field"}},
		{"readiness on init", "  containers:", "  initContainers: [{name: i, image: host, command: [\"true\"], readinessProbe: {exec: {command: [\"true\"]}}}]\n  containers:", []string{"spec.initContainers[0].readinessProbe", "Forbidden"}},
		{"name shared with init", "  containers:", "  initContainers: [{name: app, image: host, command: [\"true\"]}]\n  containers:", []string{"spec.containers[0].name", "Duplicate"}},
		{"bad stop signal", "    image: host", "    image: host\n    lifecycle: {stopSignal: SIGBOGUS}", []string{"spec.containers[0].lifecycle.stopSignal"}},
		{"hook with two handlers", "    image: host", "    image: host\n    lifecycle: {preStop: {exec: {command: [x]}, sleep: {seconds: 1}}}", []string{"spec.containers[0].lifecycle.preStop"}},
		{"two probe handlers", "    image: host", "    image: host\n    livenessProbe: {exec: {command: [\"true\"]}, tcpSocket: {port: 80}}", []string{"spec.containers[0].livenessProbe", "exactly one handler"}},
	}
	expectDecodeErrors(t, goodPod, cases)
}

type decodeErrorCase struct {
	name, from, to string
	want           []string
}

// expectDecodeErrors edits base as each case says and checks that the
// decoder refuses it with an error mentioning every wanted string.
func expectDecodeErrors(t *testing.T, base string, cases []decodeErrorCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(base, tc.from, tc.to, 1)
			if doc == base {
				t.Fatalf("test edit %q did not apply", tc.from)
			}
			_, err := Decode([]byte(doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestMultiDocumentAndJSON(t *testing.T) {
	second := strings.Replace(goodPod, "name: web", "name: db", 1)
	pods, err := Decode([]byte("# leading comment\n---\n" + goodPod + "---\n" + second + "---\n"))
	if err != nil || len(pods) != 2 || pods[1].Name != "db" {
		t.Fatalf("pods=%v err=%v", len(pods), err)
	}
	_, err = Decode([]byte(goodPod + "---\n" + strings.Replace(second, "name: db", "name: DB", 1)))
	if err == nil || !strings.Contains(err.Error(), "document 2") {
		t.Fatalf("error must name the document: %v", err)
	}
	js := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}`
	pods, err = Decode([]byte(js))
	if err != nil || pods[0].Spec.Containers[0].ImagePullPolicy != v1.PullIfNotPresent {
		t.Fatalf("json pod: %v %v", pods, err)
	}
}

func TestStampUIDFollowsContent(t *testing.T) {
	a, _ := Decode([]byte(goodPod))
	b, _ := Decode([]byte(goodPod))
	Stamp(a[0], SourceFile, "/m/web.yaml")
	Stamp(b[0], SourceFile, "/m/renamed.yaml")
	if a[0].UID == "" || a[0].UID != b[0].UID {
		t.Fatalf("same content must keep its UID across renames: %s vs %s", a[0].UID, b[0].UID)
	}
	c, _ := Decode([]byte(strings.Replace(goodPod, "1000", "1001", 1)))
	Stamp(c[0], SourceFile, "/m/web.yaml")
	if c[0].UID == a[0].UID {
		t.Fatal("changed content must change the UID")
	}
	if a[0].Annotations[AnnotationSource] != "file" || a[0].Annotations[AnnotationFile] != "/m/web.yaml" {
		t.Fatalf("annotations: %v", a[0].Annotations)
	}
	again := a[0].DeepCopy()
	Stamp(again, SourceFile, "/m/web.yaml")
	if again.UID != a[0].UID {
		t.Fatal("stamping twice changed the UID")
	}
}

func TestIgnored(t *testing.T) {
	for name, want := range map[string]bool{
		"web.yaml": false, "web.yml": false, "web.json": false,
		".web.yaml": true, ".web.yaml.swp": true, "web.yaml~": true, "web.yaml.bak": true,
		"web.yaml.dpkg-old": true, "web.yaml.dpkg-new": true, "web.yaml.rpmnew": true,
		"web.yaml.rpmsave": true, "#web.yaml#": true, "README.md": true, "web": true,
	} {
		if Ignored(name) != want {
			t.Errorf("Ignored(%q) = %v, want %v", name, !want, want)
		}
	}
}

func TestDirKeepsLastGoodPodsOfInvalidFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("web.yaml", goodPod)
	write("web.yaml.bak", goodPod)
	write("other.yaml", strings.Replace(goodPod, "name: web", "name: other", 1))
	clock := &fakeClock{t: time.Unix(1000, 0)}
	d := &Dir{Path: dir, Now: clock.now}
	st, err := d.Load()
	if err != nil || len(st.Pods) != 2 || len(st.Invalid) != 0 {
		t.Fatalf("load: %d pods, invalid %v, err %v", len(st.Pods), st.Invalid, err)
	}
	webUID := st.Pods[1].UID
	write("web.yaml", strings.Replace(goodPod, "image: host", "image: host\n    bogus: 1", 1))
	if st, _ = d.Load(); len(st.Pods) != 2 || len(st.Invalid) != 0 {
		t.Fatalf("an invalid read is confirmed before it is reported: %+v", st)
	}
	clock.advance(DefaultConfirm)
	st, _ = d.Load()
	if len(st.Pods) != 2 || st.Pods[1].UID != webUID {
		t.Fatalf("an invalid edit must keep the accepted pod: %+v", st.Pods)
	}
	if len(st.Invalid) != 1 || !strings.Contains(st.Invalid[0].Err.Error(), "bogus") ||
		!strings.HasSuffix(st.Invalid[0].File, "web.yaml") {
		t.Fatalf("invalid = %+v", st.Invalid)
	}
	os.Remove(filepath.Join(dir, "web.yaml"))
	if st, _ = d.Load(); len(st.Pods) != 2 {
		t.Fatalf("a removal is confirmed before it stops pods: %d pods", len(st.Pods))
	}
	clock.advance(DefaultConfirm)
	st, _ = d.Load()
	if len(st.Pods) != 1 || len(st.Invalid) != 0 {
		t.Fatalf("after removal: %d pods, %v", len(st.Pods), st.Invalid)
	}
}

func TestDirDuplicatePodNameAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(goodPod), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(strings.Replace(goodPod, "1000", "5", 1)), 0o644)
	st, _ := (&Dir{Path: dir}).Load()
	if len(st.Pods) != 1 || st.Pods[0].Annotations[AnnotationFile] != filepath.Join(dir, "a.yaml") {
		t.Fatalf("first file in name order must win: %+v", st.Pods)
	}
	if len(st.Invalid) != 1 || !strings.Contains(st.Invalid[0].Err.Error(), "already defined in a.yaml") {
		t.Fatalf("invalid = %+v", st.Invalid)
	}
}

func TestDirSeedKeepsPodsOfFileInvalidAtStartup(t *testing.T) {
	dir := t.TempDir()
	pods, _ := Decode([]byte(goodPod))
	Stamp(pods[0], SourceFile, filepath.Join(dir, "web.yaml"))
	os.WriteFile(filepath.Join(dir, "web.yaml"), []byte("kind: Pod\n"), 0o644)
	clock := &fakeClock{t: time.Unix(1000, 0)}
	d := &Dir{Path: dir, Now: clock.now}
	d.Seed(filepath.Join(dir, "web.yaml"), pods)
	d.Load()
	clock.advance(DefaultConfirm)
	st, _ := d.Load()
	if len(st.Pods) != 1 || st.Pods[0].UID != pods[0].UID || len(st.Invalid) != 1 {
		t.Fatalf("state = %+v", st)
	}
}

func TestDirWatchSeesWriteAndRemove(t *testing.T) {
	dir := t.TempDir()
	d := &Dir{Path: dir, Resync: time.Hour, Settle: 5 * time.Millisecond}
	if err := d.Watch(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	// Written before Run's goroutine is even scheduled: the watch set up
	// before Load must still see it.
	os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(goodPod), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan State, 4)
	go d.Run(ctx, out)
	if st := receive(t, out); len(st.Pods) != 1 {
		t.Fatalf("after write: %+v", st)
	}
	os.Remove(filepath.Join(dir, "web.yaml"))
	if st := receive(t, out); len(st.Pods) != 0 {
		t.Fatalf("after remove: %+v", st)
	}
}

func receive(t *testing.T, ch <-chan State) State {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(5 * time.Second):
		t.Fatal("no state change seen within 5s")
		return State{}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(goodPod))
	f.Add([]byte(goodPod + "---\n" + goodPod))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"x"}]}}`))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: x, resources: {limits: {cpu: 1e3}}}]}"))
	f.Add([]byte("- a\n- b"))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {'x/y': z}}\nspec: {containers: [{name: c, image: x, env: [{name: A, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := Decode(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		// An accepted pod must survive its own JSON unchanged, with the
		// same UID: what we store and report is what we run.
		for _, p := range pods {
			Stamp(p, SourceFile, "f.yaml")
			js, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Decode(js)
			if err != nil {
				t.Fatalf("re-decoding an accepted pod failed: %v\n%s", err, js)
			}
			Stamp(again[0], SourceFile, "f.yaml")
			if again[0].UID != p.UID {
				t.Fatalf("UID changed on round trip:\n%s", js)
			}
		}
	})
}

func TestDirReportsRemovalOfAFileSeenOnlyByLoad(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(goodPod), 0o644)
	d := &Dir{Path: dir, Resync: time.Hour, Settle: 5 * time.Millisecond}
	if err := d.Watch(); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.Load(); len(st.Pods) != 1 {
		t.Fatalf("load: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan State, 4)
	go d.Run(ctx, out)
	os.Remove(filepath.Join(dir, "web.yaml"))
	if st := receive(t, out); len(st.Pods) != 0 {
		t.Fatalf("after remove: %+v", st)
	}
}
