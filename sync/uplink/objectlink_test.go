package uplink_test

import (
	"crypto/ed25519"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/sync/uplink"
)

// objectHub plays the hub's side of the object topics over a broker: it
// learns the device's sealing key from seal-key, and answers object-get
// from the objects it holds, sealed for that key.
type objectHub struct {
	t      *testing.T
	client mqtt.Client
	topics protocol.Topics
	key    ed25519.PrivateKey

	mu      sync.Mutex
	sealKey *seal.PublicKey
	objects map[string]map[string][]byte // data by entry key
	asked   []protocol.ObjectEntry
}

func connectObjectHub(t *testing.T, addr string, key ed25519.PrivateKey) *objectHub {
	t.Helper()
	h := &objectHub{t: t, key: key, objects: map[string]map[string][]byte{}}
	h.client = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("the-object-hub").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true))
	if tok := h.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the hub's client cannot connect to %s: %v", addr, tok.Error())
	}
	c := h.client
	t.Cleanup(func() { c.Disconnect(0) })
	for topic, handler := range map[string]mqtt.MessageHandler{
		h.topics.Device("gw-1", protocol.KindSealKey):   h.onSealKey,
		h.topics.Device("gw-1", protocol.KindObjectGet): h.onGet,
	} {
		if tok := h.client.Subscribe(topic, 1, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribing to %s: %v", topic, tok.Error())
		}
	}
	return h
}

func (h *objectHub) onSealKey(_ mqtt.Client, m mqtt.Message) {
	k, err := protocol.DecodeSealKey(m.Payload())
	if err != nil {
		h.t.Errorf("the device's seal key: %v", err)
		return
	}
	pub, err := seal.ParsePublicKey(k.PublicKey)
	if err != nil {
		h.t.Errorf("the device's seal key: %v", err)
		return
	}
	h.mu.Lock()
	h.sealKey = pub
	h.mu.Unlock()
}

func (h *objectHub) onGet(c mqtt.Client, m mqtt.Message) {
	g, err := protocol.DecodeObjectGet(m.Payload())
	if err != nil {
		h.t.Errorf("a request the hub would refuse: %v", err)
		return
	}
	h.mu.Lock()
	h.asked = append(h.asked, g.Refs...)
	pub := h.sealKey
	var out [][]byte
	for _, e := range g.Refs {
		data, ok := h.objects[e.Key()]
		if !ok || pub == nil {
			continue
		}
		sealed, err := seal.Seal(pub, protocol.SealInfo("gw-1", e), protocol.EncodeData(data))
		if err != nil {
			h.t.Error(err)
			continue
		}
		msg, err := protocol.EncodeObject(protocol.ObjectHeader{Device: "gw-1", Entry: e}, sealed, h.key)
		if err != nil {
			h.t.Error(err)
			continue
		}
		out = append(out, msg)
	}
	h.mu.Unlock()
	for _, msg := range out {
		c.Publish(h.topics.Device("gw-1", protocol.KindObject), 1, false, msg)
	}
}

func (h *objectHub) index(gen int64, entries ...protocol.ObjectEntry) {
	h.t.Helper()
	b, err := protocol.SignObjectIndex(protocol.ObjectIndex{Device: "gw-1", Generation: gen, Entries: entries}, h.key)
	if err != nil {
		h.t.Fatal(err)
	}
	if tok := h.client.Publish(h.topics.Device("gw-1", protocol.KindObjects), 1, true, b); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		h.t.Fatalf("publishing the index: %v", tok.Error())
	}
}

func (h *objectHub) hold(e protocol.ObjectEntry, data map[string][]byte) {
	h.mu.Lock()
	h.objects[e.Key()] = data
	h.mu.Unlock()
}

func (h *objectHub) knowsKey() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sealKey != nil
}

// changeLog records what the daemon is told.
type changeLog struct {
	mu   sync.Mutex
	refs []objects.Ref
}

func (l *changeLog) take(refs []objects.Ref) {
	l.mu.Lock()
	l.refs = append(l.refs, refs...)
	l.mu.Unlock()
}

func (l *changeLog) has(r objects.Ref) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.refs, r)
}

// Over a broker: the device announces its sealing key, takes the
// retained index, asks for what it lacks, opens what the hub seals for
// it and tells the daemon; an object the hub holds back is asked for
// again at the next connection; a drop is told too.
func TestHubObjectsOverTheBroker(t *testing.T) {
	tb := startBroker(t)
	pub, priv, _ := ed25519.GenerateKey(nil)
	key, _ := seal.GenerateKey()
	h := connectObjectHub(t, tb.addr, priv)
	cm := protocol.ObjectEntry{Kind: "ConfigMap", Namespace: "default", Name: "app", UID: "u1", ResourceVersion: "1"}
	db := protocol.ObjectEntry{Kind: "Secret", Namespace: "default", Name: "db", UID: "u2", ResourceVersion: "1"}
	h.hold(cm, map[string][]byte{"app.conf": []byte("port=80")})
	h.index(1, cm, db) // db held back for now

	var changes changeLog
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) {
		c.AllowUnsigned, c.HubKey, c.SealKey = false, pub, key
		c.OnObjectsChanged = changes.take
	})
	cmRef := objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"}
	dbRef := objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}
	eventually(t, "the hub learns the device's sealing key", h.knowsKey)
	// The first request may have come before the hub knew the key: the
	// backoff asks again, but a test does not wait for it; a new index
	// asks at once.
	h.index(2, cm, db)
	eventually(t, "the ConfigMap reaches the device and the daemon hears of it", func() bool {
		o, err := a.Objects().Get(cmRef)
		return err == nil && string(o.Data["app.conf"]) == "port=80" && changes.has(cmRef)
	})
	if _, err := a.Objects().Get(dbRef); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("db, listed and held back by the hub: %v", err)
	}
	tb.b.Close() // a reconnect asks again
	tb.start()
	h = connectObjectHub(t, tb.addr, priv)
	h.hold(db, map[string][]byte{"password": []byte("s3cret")})
	h.index(2, cm, db)
	eventually(t, "db reaches the device after a reconnect", func() bool {
		o, err := a.Objects().Get(dbRef)
		return err == nil && string(o.Data["password"]) == "s3cret" && changes.has(dbRef)
	})
	changes.mu.Lock()
	changes.refs = nil
	changes.mu.Unlock()
	h.index(3, db)
	eventually(t, "the ConfigMap dropped and the daemon told", func() bool {
		_, err := a.Objects().Get(cmRef)
		return errors.Is(err, objects.ErrNotFound) && changes.has(cmRef)
	})
}
