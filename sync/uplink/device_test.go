package uplink

import (
	"time"

	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

type nopPods struct{}

func (nopPods) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }
func (nopPods) ApplyAssigned(int64, []*v1.Pod, []string)       {}
func (nopPods) Renew(time.Time)                                {}
func (nopPods) Node() (*v1.Node, error)                        { return &v1.Node{}, nil }

// message is an MQTT message as paho hands it to a handler.
type message struct{ topic, payload string }

func (m message) Duplicate() bool   { return false }
func (m message) Qos() byte         { return 1 }
func (m message) Retained() bool    { return false }
func (m message) Topic() string     { return m.topic }
func (m message) MessageID() uint16 { return 1 }
func (m message) Payload() []byte   { return []byte(m.payload) }
func (m message) Ack()              {}

func agent(t *testing.T, dir string, pub ed25519.PublicKey) *Agent {
	st, err := store.Open(filepath.Join(dir, "state.db"), store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a, err := New(Config{Broker: "mqtt://127.0.0.1:1", DeviceID: "gw-1", HubKey: pub}, st, nopPods{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func signed(t *testing.T, priv ed25519.PrivateKey, gen int64) string {
	b, err := protocol.Sign(protocol.Desired{Device: "gw-1", Generation: gen, Pods: []json.RawMessage{}}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A flood of desired documents queues nothing: junk is refused as it
// arrives, and of good ones only the newest waits to be applied.
func TestOnePendingDesiredDocument(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	a := agent(t, t.TempDir(), pub)
	topic := protocol.Topics{}.Device("gw-1", protocol.KindDesired)
	for gen := int64(1); gen <= 500; gen++ {
		a.onDesired(nil, message{topic, signed(t, priv, gen)})
		a.onDesired(nil, message{topic, `{"schema":1,"desired":{"junk":true}}`})
	}
	a.onDesired(nil, message{topic, signed(t, priv, 7)}) // older: does not replace
	if a.pending == nil || a.pending.doc.Generation != 500 {
		t.Fatalf("pending %+v, want generation 500 alone", a.pending)
	}
	if n := a.refused.Total(); n != 500 {
		t.Fatalf("%d refusals counted, want 500", n)
	}
}

// The newest generation applied survives state.db: a device with a fresh
// database refuses an older document from the same hub, not from
// another hub; the instance name is made once.
func TestGenerationFloorOutsideStateDB(t *testing.T) {
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(nil)
	a := agent(t, dir, pub)
	if !a.take(&pendingDoc{payload: []byte(signed(t, priv, 5)), doc: &protocol.Desired{Device: "gw-1", Generation: 5}}) {
		t.Fatal("generation 5 not taken")
	}
	b, _ := os.ReadFile(filepath.Join(dir, generationFile))
	if want := protocol.KeyID(pub) + " 5\n"; string(b) != want {
		t.Fatalf("%s holds %q, want %q", generationFile, b, want)
	}
	instance := a.cfg.Instance

	fresh := t.TempDir()
	os.WriteFile(filepath.Join(fresh, generationFile), b, 0o600)
	os.WriteFile(filepath.Join(fresh, instanceFile), []byte(instance+"\n"), 0o600)
	a2 := agent(t, fresh, pub) // a new state.db beside the old files
	topic := protocol.Topics{}.Device("gw-1", protocol.KindDesired)
	a2.onDesired(nil, message{topic, signed(t, priv, 4)})
	if a2.pending != nil || a2.refused.Total() != 1 {
		t.Fatalf("a replayed generation 4 after a reset: pending %+v, refused %d", a2.pending, a2.refused.Total())
	}
	a2.onDesired(nil, message{topic, signed(t, priv, 5)})
	if a2.pending == nil || a2.pending.doc.Generation != 5 {
		t.Fatalf("the current generation 5 refused after a reset")
	}
	if a2.cfg.Instance != instance {
		t.Fatalf("instance %q, was %q", a2.cfg.Instance, instance)
	}
	// Another hub's key: the kept generation is not its.
	pub2, _, _ := ed25519.GenerateKey(nil)
	if floor, err := loadFloor(fresh, protocol.KeyID(pub2)); err != nil || floor != 0 {
		t.Fatalf("floor for another hub: %d %v", floor, err)
	}
	os.WriteFile(filepath.Join(fresh, generationFile), []byte("garbage"), 0o600)
	if _, err := loadFloor(fresh, protocol.KeyID(pub)); err == nil || !strings.Contains(err.Error(), generationFile) {
		t.Fatalf("a corrupt %s: %v", generationFile, err)
	}
}
