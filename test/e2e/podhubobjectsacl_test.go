package e2e

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
)

// ConfigMaps and Secrets over a real Mosquitto with the packaged ACL:
// the device whose pod references a Secret gets its index and, asking,
// the Secret sealed for the key in its enrolment bundle; another
// device's credentials read none of its topics, and its requests for
// the victim's objects are refused by the hub (describe device shows
// it).
func TestPodhubObjectsOverMosquittoACL(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	pki := filepath.Join(h.dataDir, "pki")
	addr, _ := startMosquittoAfter(t, h, pki)
	h.addr = addr
	victimDir, _ := h.enrol(t, "gw-victim")
	evilDir, _ := h.enrol(t, "gw-evil")
	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("broker: mqtts://%s\ntls: {ca: %s}\n",
		addr, filepath.Join(pki, "ca.pem"))), 0o600)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.startCmd()
	t.Cleanup(h.stop)

	const value = "e2e-secret-value-7f3a"
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.yaml")
	os.WriteFile(secret, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: "+value+"\n"), 0o600)
	pod := filepath.Join(dir, "pod.yaml")
	os.WriteFile(pod, []byte(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  volumes: [{name: s, secret: {secretName: db}}]
  containers: [{name: app, image: registry.example/app:1, volumeMounts: [{name: s, mountPath: /etc/db}]}]
`), 0o600)
	t.Log(mustCLI(t, h, "apply", "-f", secret))
	t.Log(mustCLI(t, h, "apply", "-f", pod, "--device", "gw-victim"))

	top := protocol.Topics{}
	hubPub := hubKey(t, h)
	var mu sync.Mutex
	var index *protocol.ObjectIndex
	var opened map[string][]byte
	var stolen []string

	// gw-evil listens on the victim's object topics and asks for its
	// Secret on its own topic and on the victim's.
	evil, _, err := dial(t, "mqtts://"+addr, bundle(evilDir).tls(t), "gw-evil")
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Disconnect(0)
	for _, topic := range []string{top.Device("gw-victim", protocol.KindObjects), top.Device("gw-victim", protocol.KindObject)} {
		evil.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
			mu.Lock()
			stolen = append(stolen, m.Topic())
			mu.Unlock()
		}).WaitTimeout(5 * time.Second)
	}
	evil.Subscribe(top.Device("gw-evil", protocol.KindObject), 1, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		stolen = append(stolen, m.Topic())
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)

	// The victim, with its bundle's certificate and sealing key.
	key, err := seal.LoadPrivateKey(filepath.Join(victimDir, "seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	victim, _, err := dial(t, "mqtts://"+addr, bundle(victimDir).tls(t), "gw-victim")
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Disconnect(0)
	victim.Subscribe(top.Device("gw-victim", protocol.KindObjects), 1, func(_ mqtt.Client, m mqtt.Message) {
		ix, err := protocol.OpenObjectIndex(m.Payload(), "gw-victim", hubPub)
		if err != nil {
			t.Errorf("index: %v", err)
			return
		}
		mu.Lock()
		index = ix
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	victim.Subscribe(top.Device("gw-victim", protocol.KindObject), 1, func(_ mqtt.Client, m mqtt.Message) {
		hd, sealed, err := protocol.OpenObject(m.Payload(), "gw-victim", hubPub)
		if err != nil {
			t.Errorf("object: %v", err)
			return
		}
		plain, err := key.Open(protocol.SealInfo("gw-victim", hd.Entry), sealed)
		if err != nil {
			t.Errorf("object %s: %v", hd.Entry.Key(), err)
			return
		}
		data, _ := protocol.DecodeData(plain)
		mu.Lock()
		opened = data
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	announce, _ := protocol.EncodeSealKey("gw-victim", key.Public().Bytes())
	victim.Publish(top.Device("gw-victim", protocol.KindSealKey), 1, true, announce).WaitTimeout(5 * time.Second)

	waitForLong(t, 10*time.Second, "the victim's index", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return index != nil && len(index.Entries) == 1
	})
	mu.Lock()
	entries := index.Entries
	mu.Unlock()
	ask, _ := protocol.EncodeObjectGet(entries)
	evil.Publish(top.Device("gw-evil", protocol.KindObjectGet), 1, false, ask).WaitTimeout(5 * time.Second)
	evil.Publish(top.Device("gw-victim", protocol.KindObjectGet), 1, false, ask).WaitTimeout(5 * time.Second)
	// Asked after gw-evil: answered after its requests were handled.
	victim.Publish(top.Device("gw-victim", protocol.KindObjectGet), 1, false, ask).WaitTimeout(5 * time.Second)
	waitForLong(t, 10*time.Second, "the victim's Secret, opened with its bundle's key", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return string(opened["password"]) == value
	})
	waitForLong(t, 10*time.Second, "gw-evil's request refused at the hub", func() bool {
		out, _ := h.cli("describe", "device", "gw-evil")
		return strings.Contains(out, "not in the device's index")
	})
	out := mustCLI(t, h, "describe", "device", "gw-victim")
	if !strings.Contains(out, "Sealing key:") || !strings.Contains(out, "enrolled") || !strings.Contains(out, "Object Secret default/db:") {
		t.Errorf("describe device gw-victim:\n%s", out)
	}
	if strings.Contains(out, value) {
		t.Errorf("describe device shows the Secret's value:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stolen) > 0 {
		t.Errorf("gw-evil received %d messages: %v", len(stolen), stolen)
	}
}

// hubKey is the hub's public key from podhub init.
func hubKey(t *testing.T, h *podhubServer) ed25519.PublicKey {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.dataDir, "hub.pub"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := protocol.ParsePublicKey(data)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// A hub pod takes its environment from a ConfigMap and a Secret applied
// at the hub: they reach the enrolled daemon sealed for its bundle's
// key, and the container gets the values as a static pod gets local
// ones; the hub shows the device's index.
func TestPodhubObjectsReachAHubPod(t *testing.T) {
	requireRoot(t)
	h := newPodhub(t)
	d := newDaemon(t)
	_, hubConfig := h.enrol(t, "gw-obj")
	d.withConfig(hubConfig + hostCommandsAsRoot)
	d.start()
	dir := t.TempDir()
	objs := filepath.Join(dir, "objects.yaml")
	os.WriteFile(objs, []byte(localObjects), 0o600)
	t.Log(mustCLI(t, h, "apply", "-f", objs))
	out := filepath.Join(d.dir, "hub-env-out")
	pod := filepath.Join(dir, "pod.yaml")
	os.WriteFile(pod, []byte(objectsPod("hubenv", out, `    envFrom:
    - configMapRef: {name: app}
    - prefix: DB_
      secretRef: {name: db}
    env:
    - name: DB_PASSWORD
      value: "$(DB_password)"
    - name: PW
      valueFrom: {secretKeyRef: {name: db, key: password}}
    - name: LEVEL
      value: "level-$(LEVEL)"
`)), 0o644)
	start := time.Now()
	t.Log(mustCLI(t, h, "apply", "-f", pod, "--device", "gw-obj"))
	got := waitForValue(t, 30*time.Second, "the hub pod's env written to "+out,
		func() string { b, _ := os.ReadFile(out); return strings.TrimSpace(string(b)) },
		func(s string) bool { return s != "" })
	t.Logf("hub pod applied → its container started with the hub's objects in %v", time.Since(start))
	if want := "prod s3cret-value s3cret-value level-3"; got != want {
		t.Fatalf("env: %q, want %q", got, want)
	}
	desc := mustCLI(t, h, "describe", "device", "gw-obj")
	for _, want := range []string{"Object ConfigMap default/app:", "Object Secret default/db:", "enrolled"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe device lacks %q:\n%s", want, desc)
		}
	}
	if strings.Contains(desc, "s3cret-value") {
		t.Errorf("describe device shows the Secret's value:\n%s", desc)
	}
	// The ConfigMap applied changed: the device's next index. The object
	// link recomputes indexes only when kicked (it has no period), so
	// the bound need only be finite: 15 s leaves each poll's podhub
	// process room on a loaded machine; the time is logged.
	os.WriteFile(objs, []byte(strings.Replace(localObjects, `LEVEL: "3"`, `LEVEL: "4"`, 1)), 0o600)
	start = time.Now()
	t.Log(mustCLI(t, h, "apply", "-f", objs))
	waitForLong(t, 15*time.Second, "the device's index at generation 2 (the apply kicks the object link; nothing else would)", func() bool {
		out, _ := h.cli("describe", "device", "gw-obj")
		return strings.Contains(out, "generation 2, 2 object(s)")
	})
	t.Logf("ConfigMap applied changed → the device's new index stored and published in %v (with the CLI's round trips)", time.Since(start))
}
