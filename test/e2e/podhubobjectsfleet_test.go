package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// ConfigMaps and Secrets applied at the hub, end to end with real
// binaries: podhub with its embedded broker, two enrolled daemons (dev-a
// with containerd, dev-b), a TLS registry that wants a login.
//
//  1. A Deployment placed on dev-a by its nodeSelector pulls its image
//     with a kubernetes.io/dockerconfigjson pull secret, mounts a
//     ConfigMap and takes a Secret (a random marker) as env.
//  2. The ConfigMap applied changed reaches the running container's
//     volume within 2 s (read on the host), and the container reads it,
//     not restarted.
//  3. dev-b's credentials never get dev-a's objects: a client with its
//     certificate subscribing to everything it may try (while dev-a's
//     objects are first sent) and asking for dev-a's entries gets
//     nothing; dev-b's daemon (while the ConfigMap changes) neither, and
//     its state.db holds none.
//  4. The marker and the registry login are nowhere in clear: not in any
//     message the broker carried (the hub's identity subscribed to the
//     whole tree from the start), not in any file of either device or of
//     the hub outside the volumes' tmpfs (state.db, fleet.db and their
//     WALs among them), not in the daemons' or the hub's log.
//  5. (with 1) the pull secret's login is the one the pull used.
//  6. A process pod on dev-a gets the Secret as a volume at its mountPath,
//     the host not seeing it, and env from the ConfigMap.
//
// It takes 2 to 5 s: the web pod's first pull waits for its pull secret
// (the hub lists it before it sends the pod; docs/hub.md), so no image
// back-off follows.
func TestPodhubObjectsOnTwoDevices(t *testing.T) {
	requireRoot(t)
	began := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	marker, pullPassword := "pv-marker-"+randomHex(t, 16), "pull-"+randomHex(t, 8)

	h := newPodhub(t)
	obs := newObserver(t, h)
	registry, caFile := registrytest.StartTLS(t, "fleet", pullPassword)
	certs := filepath.Join(t.TempDir(), "certs.d")
	ca, _ := os.ReadFile(caFile)
	os.MkdirAll(filepath.Join(certs, registry), 0o755)
	os.WriteFile(filepath.Join(certs, registry, "ca.crt"), ca, 0o644)

	_, cfgA := h.enrol(t, "dev-a")
	dirB, cfgB := h.enrol(t, "dev-b")
	for id, site := range map[string]string{"dev-a": "a", "dev-b": "b"} {
		mustCLI(t, h, "label", "device", id, "site="+site)
	}
	a, ctrd := ctrdDaemonWith(t, "", cfgA+hostCommandsAsRoot, ", registryCertsDir: "+certs)
	killContainersAtCleanup(t, a)
	step("hub, registry, containerd and dev-a's daemon up")

	// dev-b's certificate in a client that subscribes to all it can
	// while dev-a's objects are first sent (dev-b's daemon, which would
	// hold the same client ID, starts after).
	spy := newCredentialSpy(t, h, dirB, "dev-b")

	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/pushed:1", Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	ref := registry + "/pv/objects-web:1"
	registrytest.PushWithCtr(t, ctrd.Address, archive, "podvisor.test/pushed:1", ref, "fleet:"+pullPassword, caFile)
	step("image pushed to the TLS registry")

	pullAuth := base64.StdEncoding.EncodeToString([]byte("fleet:" + pullPassword))
	objectsFile := func(greeting string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {greeting: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {marker: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: regcred}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths": {%q: {"auth": %q}}}'
`, greeting, marker, registry, pullAuth)
	}
	dir := t.TempDir()
	objectsPath, webPath, procPath := filepath.Join(dir, "objects.yaml"), filepath.Join(dir, "web.yaml"), filepath.Join(dir, "proc.yaml")
	os.WriteFile(objectsPath, []byte(objectsFile("hello")), 0o600)
	os.WriteFile(webPath, []byte(workloadfile.Deployment("web", 1, `
nodeSelector: {site: a}
terminationGracePeriodSeconds: 1
imagePullSecrets: [{name: regcred}]
volumes: [{name: conf, configMap: {name: web-config}}]
containers:
- name: main
  image: `+ref+`
  imagePullPolicy: Always
  command: ["sleep", "1000"]
  env: [{name: MARKER, valueFrom: {secretKeyRef: {name: web-secret, key: marker}}}]
  volumeMounts: [{name: conf, mountPath: /etc/web}]`)), 0o644)
	creds := t.TempDir() // the host's directory the process pod's Secret goes over
	os.WriteFile(procPath, []byte(`apiVersion: v1
kind: Pod
metadata: {name: proc}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  volumes: [{name: creds, secret: {secretName: web-secret}}]
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    env: [{name: GREETING, valueFrom: {configMapKeyRef: {name: web-config, key: greeting}}}]
    volumeMounts: [{name: creds, mountPath: `+creds+`}]
`), 0o644)
	mountsBefore := mountsUnder(t, creds)
	applied := time.Now()
	t.Log(mustCLI(t, h, "apply", "-f", objectsPath))
	t.Log(mustCLI(t, h, "apply", "-f", webPath))
	t.Log(mustCLI(t, h, "apply", "-f", procPath, "--device", "dev-a"))

	// 1, 5: the Deployment's pod runs on dev-a, pulled with the pull
	// secret, its ConfigMap mounted and its Secret in its env.
	web := waitPodWhere(t, a, "the Deployment's pod web-* Running on dev-a", 90*time.Second,
		func(p *v1.Pod) bool { return strings.HasPrefix(p.Name, "web-") && running(p) })
	step(fmt.Sprintf("web pod %s Running on dev-a, %.1fs after the apply", web.Name, time.Since(applied).Seconds()))
	// The hub lists the pod's objects before it sends the pod, and the
	// device waits, quietly, for those on their way: the first pull has
	// its login, and nothing is said that the kubelet (reading the API
	// server, where the objects are) would not say.
	desc, _, _ := a.cli("describe", "pod", web.Name)
	for _, bad := range []string{"Warning", "FailedToRetrieveImagePullSecret", "ErrImagePull", "Back-off", "FailedMount",
		"CreateContainerConfigError", "ObjectsNotReceived"} {
		if strings.Contains(desc, bad) {
			t.Fatalf("the web pod's describe says %s: its start did not wait for its objects:\n%s", bad, desc)
		}
	}
	read := func(pod string, args ...string) func() string {
		return func() string {
			out, _, _ := a.cli(append([]string{"exec", pod, "--"}, args...)...)
			return strings.TrimSpace(out)
		}
	}
	is := func(want string) func(string) bool { return func(s string) bool { return s == want } }
	waitForValue(t, 10*time.Second, "the web pod's ConfigMap volume", read(web.Name, "cat", "/etc/web/greeting"), is("hello"))
	if read(web.Name, "sh", "-c", "echo $MARKER")() != marker {
		t.Fatal("the web pod's MARKER is not the Secret's marker")
	}

	// 6: the process pod, its Secret at its mountPath in its own mount
	// namespace, its env from the ConfigMap.
	a.waitPod("proc", 30*time.Second, running)
	step("proc Running on dev-a")
	if read("proc", "cat", filepath.Join(creds, "marker"))() != marker {
		t.Fatal("the process pod does not see the Secret's marker at its mountPath")
	}
	if got := read("proc", "sh", "-c", "echo $GREETING")(); got != "hello" {
		t.Fatalf("the process pod's GREETING is %q, want hello", got)
	}
	if entries, _ := os.ReadDir(creds); len(entries) != 0 {
		t.Fatalf("the host sees %d entries in the process pod's Secret mountPath %s", len(entries), creds)
	}
	if got := mountsUnder(t, creds); len(got) != len(mountsBefore) {
		t.Fatalf("the host's mount table holds %v under the process pod's mountPath", got)
	}

	// 3: the spy asks the hub for dev-a's entries, on dev-b's topic (the
	// hub refuses) and on dev-a's (the broker drops it), then leaves.
	hubPub := hubKey(t, h)
	var index *protocol.ObjectIndex
	for _, m := range obs.messages(protocol.Topics{}.Device("dev-a", protocol.KindObjects)) {
		if ix, err := protocol.OpenObjectIndex(m, "dev-a", hubPub); err == nil && (index == nil || ix.Generation > index.Generation) {
			index = ix
		}
	}
	if index == nil || len(index.Entries) != 3 {
		t.Fatalf("dev-a's index as the hub's identity saw it: %+v, want its 3 objects", index)
	}
	spy.ask(t, "dev-b", index.Entries)
	waitForLong(t, 10*time.Second, "dev-b's request for dev-a's objects refused at the hub", func() bool {
		out, _ := h.cli("describe", "device", "dev-b")
		return strings.Contains(out, "not in the device's index")
	})
	spy.check(t, "dev-a", marker)
	spy.ask(t, "dev-a", index.Entries)
	select {
	case <-spy.lost:
	case <-time.After(10 * time.Second):
		t.Fatal("dev-b's client published on dev-a's object-get and the broker kept it connected")
	}
	step("dev-b's credentials got none of dev-a's objects")

	b := newDaemon(t)
	b.withConfig(cfgB + hostCommandsAsRoot)
	b.start()
	waitForLong(t, 30*time.Second, "dev-b Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "dev-b") == "Ready"
	})
	step("dev-b's daemon Ready")

	// 2: the ConfigMap changed reaches the running container's file in
	// place, within 2 s of the apply (its CLI's round trip included).
	// The bound is on dev-a's volume, read on the host: an exec into a
	// containerd pod can take over a second on a busy machine.
	before := web.Status.ContainerStatuses[0]
	onHost := a.volumeFile(web, "conf", "greeting")
	hostValue := func() string { b, _ := os.ReadFile(onHost); return strings.TrimSpace(string(b)) }
	if got := hostValue(); got != "hello" {
		t.Fatalf("%s holds %q, want hello: not the volume the web pod reads", onHost, got)
	}
	os.WriteFile(objectsPath, []byte(objectsFile("changed")), 0o600)
	changed := time.Now()
	mustCLI(t, h, "apply", "-f", objectsPath)
	returned := time.Now()
	waitForValue(t, 10*time.Second, "dev-a's volume file of the web pod rewritten on the host", hostValue, is("changed"))
	took := time.Since(changed)
	step(fmt.Sprintf("ConfigMap applied changed → dev-a's volume updated %v later (the apply returned after %v)", took, returned.Sub(changed)))
	if took > 2*time.Second {
		t.Errorf("the volume took %v to follow its ConfigMap applied at the hub, more than 2 s", took)
	}
	// In place: the running container reads the same file (no time bound
	// on the exec's own latency).
	waitForValue(t, 10*time.Second, "the web pod's container to read the updated volume", read(web.Name, "cat", "/etc/web/greeting"), is("changed"))
	after := a.waitPod(web.Name, 5*time.Second, running).Status.ContainerStatuses[0]
	if after.RestartCount != 0 || after.ContainerID != before.ContainerID || !after.State.Running.StartedAt.Equal(&before.State.Running.StartedAt) {
		t.Errorf("the update restarted the container: before %s %v, after %s %v restarts %d",
			before.ContainerID, before.State.Running.StartedAt, after.ContainerID, after.State.Running.StartedAt, after.RestartCount)
	}
	if got := read("proc", "sh", "-c", "echo $GREETING")(); got != "hello" {
		t.Errorf("the running process pod's env changed to %q", got)
	}

	// 3: dev-b's daemon got nothing of dev-a's, its store holds none.
	for _, name := range []string{"state.db", "state.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(b.data, name))
		for _, s := range []string{"web-config", "web-secret", "regcred", marker} {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("dev-b's %s holds %q of dev-a's objects", name, redact(s, marker))
			}
		}
	}
	if aDB, _ := os.ReadFile(filepath.Join(a.data, "state.db")); !bytes.Contains(aDB, []byte("web-secret")) {
		if wal, _ := os.ReadFile(filepath.Join(a.data, "state.db-wal")); !bytes.Contains(wal, []byte("web-secret")) {
			t.Errorf("dev-a's state.db names no web-secret: the search of dev-b's would prove nothing")
		}
	}

	// 4: nothing in clear anywhere.
	secrets := map[string]string{"the Secret's marker": marker, "the pull password": pullPassword, "the pull login": pullAuth}
	for _, f := range []string{filepath.Join(a.data, "state.db"), filepath.Join(b.data, "state.db"), filepath.Join(h.dataDir, "fleet.db")} {
		if !exists(f) {
			t.Errorf("%s missing: the search below would miss it", f)
		}
	}
	var scanned int
	for _, root := range []string{a.dir, b.dir, h.dataDir} {
		n, found := filesHolding(t, root, secrets)
		scanned += n
		for _, f := range found {
			t.Errorf("in clear on disk: %s", f)
		}
	}
	logs := map[string]string{"dev-a's daemon log": a.log.String(), "dev-b's daemon log": b.log.String(), "podhub's log": h.log.String()}
	for name, text := range logs {
		for what, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s in %s", what, name)
			}
		}
	}
	if len(obs.messages(protocol.Topics{}.Device("dev-a", protocol.KindObject))) < 4 {
		t.Errorf("the hub's identity saw %d object messages to dev-a, want its 3 objects and the changed ConfigMap: the search of messages would prove little",
			len(obs.messages(protocol.Topics{}.Device("dev-a", protocol.KindObject))))
	}
	topics := 0
	for topic, payloads := range obs.all() {
		topics++
		for _, p := range payloads {
			for what, s := range secrets {
				if bytes.Contains(p, []byte(s)) {
					t.Errorf("%s in clear in a message on %s", what, topic)
				}
			}
		}
	}
	step(fmt.Sprintf("no secret in clear: %d files, 3 logs, messages on %d topics searched", scanned, topics))
}

// randomHex is n random bytes in hex.
func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// redact hides the marker in a failure's message.
func redact(s, marker string) string {
	if s == marker {
		return "<the marker>"
	}
	return s
}

// waitPodWhere waits, through the daemon's watch, until a listed pod
// satisfies cond, and returns it.
func waitPodWhere(t *testing.T, d *daemon, what string, timeout time.Duration, cond func(p *v1.Pod) bool) *v1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var version uint64
	var seen []string
	for {
		list, err := d.client.WatchPods(ctx, version)
		if err != nil {
			t.Fatalf("not within %v: %s (last seen: %s)", timeout, what, strings.Join(seen, "; "))
		}
		fmt.Sscan(list.ResourceVersion, &version)
		seen = seen[:0]
		for i := range list.Items {
			p := &list.Items[i]
			if cond(p) {
				return p
			}
			seen = append(seen, p.Name+": "+describePod(p))
		}
	}
}

// messages are the payloads the observer saw on topic.
func (o *observer) messages(topic string) [][]byte {
	return o.all()[topic]
}

// all is every payload the observer saw, by topic.
func (o *observer) all() map[string][][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][][]byte{}
	for k := range o.payloads {
		topic, payload, _ := strings.Cut(k, "\x00")
		out[topic] = append(out[topic], []byte(payload))
	}
	return out
}

// filesHolding searches every regular file under root, but those on the
// mounts under it (the pods' volumes, tmpfs by design), for the secrets'
// values, and returns how many files it read and what it found where.
func filesHolding(t *testing.T, root string, secrets map[string]string) (int, []string) {
	t.Helper()
	mounts := mountsUnder(t, root)
	var n int
	var found []string
	filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.IsDir() && path != root {
			for _, m := range mounts {
				if path == m {
					return filepath.SkipDir
				}
			}
		}
		if !e.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		n++
		for what, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				found = append(found, what+" in "+path)
			}
		}
		return nil
	})
	return n, found
}

// credentialSpy is a client with a device's certificate that subscribes
// to every filter it might be let read, recording what it is sent.
type credentialSpy struct {
	c       mqtt.Client
	lost    <-chan struct{}
	device  string
	mu      sync.Mutex
	got     map[string][][]byte // topic → payloads
	granted map[string]byte     // filter → the broker's SUBACK code
}

func newCredentialSpy(t *testing.T, h *podhubServer, dir, device string) *credentialSpy {
	t.Helper()
	c, lost, err := dial(t, "mqtts://"+h.addr, bundle(dir).tls(t), device)
	if err != nil {
		t.Fatalf("%s's certificate connecting: %v", device, err)
	}
	s := &credentialSpy{c: c, lost: lost, device: device, got: map[string][][]byte{}, granted: map[string]byte{}}
	top := protocol.Topics{}
	filters := []string{"#", "podvisor/v1/#", "podvisor/v1/devices/+/objects", "podvisor/v1/devices/+/object",
		top.Device("dev-a", protocol.KindObjects), top.Device("dev-a", protocol.KindObject), top.Device("dev-a", protocol.KindDesired),
		top.Device(device, protocol.KindObjects), top.Device(device, protocol.KindObject), top.HubPresence()}
	for _, f := range filters {
		tok := c.Subscribe(f, 1, func(_ mqtt.Client, m mqtt.Message) {
			s.mu.Lock()
			s.got[m.Topic()] = append(s.got[m.Topic()], m.Payload())
			s.mu.Unlock()
		})
		if !tok.WaitTimeout(5 * time.Second) {
			t.Fatalf("subscribing to %s: no SUBACK", f)
		}
		if st, ok := tok.(*mqtt.SubscribeToken); ok {
			for filter, code := range st.Result() {
				s.granted[filter] = code
			}
		}
	}
	return s
}

// ask publishes an object-get for entries on device's topic.
func (s *credentialSpy) ask(t *testing.T, device string, entries []protocol.ObjectEntry) {
	t.Helper()
	req, err := protocol.EncodeObjectGet(entries)
	if err != nil {
		t.Fatal(err)
	}
	s.c.Publish(protocol.Topics{}.Device(device, protocol.KindObjectGet), 1, false, req).WaitTimeout(5 * time.Second)
}

// check checks what the spy was sent: the hub's presence (so its
// subscriptions did deliver), nothing on victim's topics, no object,
// nothing holding the marker.
func (s *credentialSpy) check(t *testing.T, victim, marker string) {
	t.Helper()
	select {
	case <-s.lost:
		t.Fatalf("the broker dropped %s's client: what it was not sent proves nothing", s.device)
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var topics []string
	for topic := range s.got {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	t.Logf("%s's client: SUBACK codes %v; sent messages on %v", s.device, s.granted, topics)
	if len(s.got[protocol.Topics{}.HubPresence()]) == 0 {
		t.Errorf("%s's client was sent no hub presence: its subscriptions delivered nothing", s.device)
	}
	for topic, payloads := range s.got {
		if strings.Contains(topic, "/"+victim+"/") {
			t.Errorf("%s's client was sent %d messages on %s", s.device, len(payloads), topic)
		}
		if _, kind, err := (protocol.Topics{}).Parse(topic); err == nil && (kind == protocol.KindObject || kind == protocol.KindObjects) {
			t.Errorf("%s's client was sent %d messages on %s", s.device, len(payloads), topic)
		}
		for _, p := range payloads {
			if bytes.Contains(p, []byte(marker)) {
				t.Errorf("%s's client was sent the marker on %s", s.device, topic)
			}
		}
	}
}
