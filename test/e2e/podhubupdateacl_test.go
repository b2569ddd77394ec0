package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// An update over a real Mosquitto with the packaged ACL: two simulated
// devices fetch their artifacts through it, both at once (each takes
// ~30 MB at the hub's 4 MiB/s: one after the other doubled the test's
// time), and commit; a third device's
// credentials can neither read their orders and chunks nor ask for
// their artifacts on their topics, and the hub refuses it an artifact
// on its own topic (it has no order).
func TestPodhubUpdateOverMosquittoACL(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	pki := filepath.Join(h.dataDir, "pki")
	addr, _ := startMosquittoAfter(t, h, pki)
	h.addr = addr
	evilDir, _ := h.enrol(t, "gw-evil")
	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("broker: mqtts://%s\ntls: {ca: %s}\n",
		addr, filepath.Join(pki, "ca.pem"))), 0o600)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.startCmd()
	t.Cleanup(h.stop)

	sims := startUpdateSims(t, h, 2, func(string, *protocol.Release) string { return "" })
	victim := sims.devices[0].ID

	// gw-evil listens on the victim's order and chunk topics and on its
	// own chunk topic.
	evil, _, err := dial(t, "mqtts://"+addr, bundle(evilDir).tls(t), "gw-evil")
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Disconnect(0)
	var mu sync.Mutex
	var stolen []string
	var refusals []string
	top := protocol.Topics{}
	for _, topic := range []string{top.Device(victim, protocol.KindUpdate), top.Device(victim, protocol.KindChunk)} {
		evil.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
			mu.Lock()
			stolen = append(stolen, m.Topic())
			mu.Unlock()
		}).WaitTimeout(5 * time.Second)
	}
	evil.Subscribe(top.Device("gw-evil", protocol.KindChunk), 1, func(_ mqtt.Client, m mqtt.Message) {
		if c, _, err := protocol.DecodeChunk(m.Payload()); err == nil && c.Error != "" {
			mu.Lock()
			refusals = append(refusals, c.Error)
			mu.Unlock()
		}
	}).WaitTimeout(5 * time.Second)

	t.Log(mustCLI(t, h, append([]string{"release", "push", "--version", "v1.1.0"}, releaseFiles(t)...)...))
	perDevice := wireBytes(t, h, runtime.GOARCH)
	t.Log(mustCLI(t, h, "update", "--version", "v1.1.0", "--selector", "kind=sim", "--max-unavailable", "2"))
	waitForLong(t, time.Minute, victim+" ordered", func() bool { return sims.devices[0].Ordered.Load() == 1 })

	// The victim's artifact, asked for on its topic and on gw-evil's.
	out := mustCLI(t, h, "describe", "release", "v1.1.0")
	i := strings.Index(out, "sha256:")
	if i < 0 {
		t.Fatalf("describe release:\n%s", out)
	}
	sha := strings.Fields(out[i+len("sha256:"):])[0]
	ask := protocol.Encode(&protocol.Fetch{Order: 1, SHA256: sha, Offset: 0, Length: protocol.MaxChunkBytes})
	evil.Publish(top.Device(victim, protocol.KindFetch), 1, false, ask).WaitTimeout(5 * time.Second)
	evil.Publish(top.Device("gw-evil", protocol.KindFetch), 1, false, ask).WaitTimeout(5 * time.Second)

	waitForLong(t, 3*time.Minute, "update podvisor-v1.1.0 Complete over Mosquitto", func() bool {
		return getUpdate(t, h, "podvisor-v1.1.0").Status.Phase == "Complete"
	})
	for _, d := range sims.devices {
		if d.Running() != "v1.1.0" || d.Received.Load() < perDevice {
			t.Errorf("%s: runs %s, received %d of %d bytes", d.ID, d.Running(), d.Received.Load(), perDevice)
		}
	}
	waitForLong(t, 10*time.Second, "the hub's refusal of gw-evil's fetch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refusals) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(stolen) > 0 {
		t.Errorf("gw-evil received %d messages of %s's update and chunk topics: %v", len(stolen), victim, stolen[:min(3, len(stolen))])
	}
	if !strings.Contains(refusals[0], "not this device's current order") {
		t.Errorf("refusal %q", refusals[0])
	}
}
