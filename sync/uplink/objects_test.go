package uplink

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/throttle"
)

// syncBuffer is a log the code under test writes while the test reads it.
type syncBuffer = syncbuf.Buffer

// objHub plays the hub's side of the objects: its signing key, and the
// device's sealing key it seals for.
type objHub struct {
	t      testing.TB
	pub    ed25519.PublicKey
	priv   ed25519.PrivateKey
	device *seal.PrivateKey
}

func newObjHub(t testing.TB) *objHub {
	pub, priv, _ := ed25519.GenerateKey(nil)
	dev, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return &objHub{t: t, pub: pub, priv: priv, device: dev}
}

func (h *objHub) index(gen int64, entries ...protocol.ObjectEntry) message {
	h.t.Helper()
	b, err := protocol.SignObjectIndex(protocol.ObjectIndex{Device: "gw-1", Generation: gen, Entries: entries}, h.priv)
	if err != nil {
		h.t.Fatal(err)
	}
	return message{protocol.Topics{}.Device("gw-1", protocol.KindObjects), string(b)}
}

// object seals data for the device's key, under a header for device.
func (h *objHub) object(e protocol.ObjectEntry, data map[string][]byte) message {
	return h.objectFor("gw-1", h.device.Public(), h.priv, e, data)
}

func (h *objHub) objectFor(device string, pub *seal.PublicKey, key ed25519.PrivateKey, e protocol.ObjectEntry, data map[string][]byte) message {
	h.t.Helper()
	sealed, err := seal.Seal(pub, protocol.SealInfo(device, e), protocol.EncodeData(data))
	if err != nil {
		h.t.Fatal(err)
	}
	typ := ""
	if e.Kind == "Secret" {
		typ = "Opaque"
	}
	b, err := protocol.EncodeObject(protocol.ObjectHeader{Device: device, Entry: e, Type: typ}, sealed, key)
	if err != nil {
		h.t.Fatal(err)
	}
	return message{protocol.Topics{}.Device("gw-1", protocol.KindObject), string(b)}
}

func secretEntry(name, rv string) protocol.ObjectEntry {
	return protocol.ObjectEntry{Kind: "Secret", Namespace: "default", Name: name, UID: "uid-" + name, ResourceVersion: rv}
}

func secretRef(name string) objects.Ref {
	return objects.Ref{Kind: objects.Secret, Namespace: "default", Name: name}
}

// objAgent is an agent of gw-1 that takes objects, on state.db in dir.
func objAgent(t testing.TB, dir string, h *objHub, edit func(*Config)) (*Agent, *syncBuffer) {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "state.db"), store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs := &syncBuffer{}
	cfg := Config{Broker: "mqtt://127.0.0.1:1", DeviceID: "gw-1", HubKey: h.pub, SealKey: h.device,
		OnObjectsChanged: func([]objects.Ref) {}}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(cfg, st, nopPods{}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return a, logs
}

// poll is the requests the agent would send at now.
func (a *Agent) pollObjects(now time.Time, event bool) ([][]protocol.ObjectEntry, time.Time) {
	a.objs.mu.Lock()
	defer a.objs.mu.Unlock()
	return a.objs.set.poll(now, event)
}

// takeChanged is what the daemon would be told now.
func (a *Agent) takeChanged() map[objects.Ref]bool {
	a.objs.chMu.Lock()
	defer a.objs.chMu.Unlock()
	c := a.objs.changed
	a.objs.changed = map[objects.Ref]bool{}
	return c
}

func names(batches [][]protocol.ObjectEntry) []string {
	var out []string
	for _, b := range batches {
		for _, e := range b {
			out = append(out, e.Name)
		}
	}
	return out
}

// An index makes the device ask for what it lacks, in requests of at
// most 64 refs, at once; what stays missing is asked for again after a
// backoff that doubles, and only while it stays in the index; an
// immutable object held is never asked for again.
func TestObjectIndexAsksForWhatIsMissing(t *testing.T) {
	h := newObjHub(t)
	a, _ := objAgent(t, t.TempDir(), h, nil)
	var entries []protocol.ObjectEntry
	for i := range 70 {
		entries = append(entries, secretEntry(fmt.Sprintf("s%02d", i), "1"))
	}
	entries[0].Immutable = true
	a.onObjectIndex(nil, h.index(1, entries...))
	t0 := time.Unix(1000, 0)
	batches, next := a.pollObjects(t0, true)
	if len(batches) != 2 || len(batches[0]) != protocol.MaxObjectGetRefs || len(batches[1]) != 6 || !next.Equal(t0.Add(objectRetryMin)) {
		t.Fatalf("requests %d (%v), next %v", len(batches), names(batches), next)
	}
	for _, b := range batches {
		if _, err := protocol.EncodeObjectGet(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries[:69] {
		a.onObject(nil, h.object(e, map[string][]byte{"k": []byte(e.Name)}))
	}
	// Not yet due: nothing; due: the one missing, and the backoff doubles.
	if b, n := a.pollObjects(t0.Add(objectRetryMin-time.Second), false); b != nil || !n.Equal(next) {
		t.Fatalf("before the backoff: %v, next %v", names(b), n)
	}
	b, n := a.pollObjects(t0.Add(objectRetryMin), false)
	if got := names(b); len(got) != 1 || got[0] != "s69" || !n.Equal(t0.Add(3*objectRetryMin)) {
		t.Fatalf("retry: %v, next %v", got, n)
	}
	// Dropped from the index: never asked for again.
	next2 := entries[:69]
	next2[0] = secretEntry("s00", "2") // a new version of an immutable object of the same UID
	next2[0].Immutable = true
	next2[1] = secretEntry("s01", "2")
	a.onObjectIndex(nil, h.index(2, next2...))
	b, n = a.pollObjects(t0.Add(time.Hour), true)
	if got := names(b); len(got) != 1 || got[0] != "s01" || !n.Equal(t0.Add(time.Hour+objectRetryMin)) {
		t.Fatalf("after index 2: %v, next %v", got, n)
	}
	// The old version serves until the new one comes.
	if o, err := a.Objects().Get(secretRef("s01")); err != nil || o.ResourceVersion != "1" {
		t.Fatalf("s01 while its new version is asked for: %+v %v", o, err)
	}
	a.onObject(nil, h.object(next2[1], map[string][]byte{"k": []byte("v2")}))
	if o, err := a.Objects().Get(secretRef("s01")); err != nil || o.ResourceVersion != "2" || string(o.Data["k"]) != "v2" {
		t.Fatalf("s01 version 2: %+v %v", o, err)
	}
	if b, n := a.pollObjects(t0.Add(2*time.Hour), false); b != nil || !n.IsZero() {
		t.Fatalf("nothing missing: %v, next %v", names(b), n)
	}
	// An older index is refused.
	a.onObjectIndex(nil, h.index(1, entries...))
	if g := a.objs.set.generation(); g != 2 {
		t.Fatalf("generation %d after a replayed index 1", g)
	}
}

// An object is kept only when it is for this device, signed by the hub,
// sealed for this device's key, intact, and an entry of the index in
// force; meanwhile the getter says db is pending (listed, not received).
func TestObjectAcceptedAndRefused(t *testing.T) {
	h := newObjHub(t)
	a, logs := objAgent(t, t.TempDir(), h, nil)
	a.objs.refused = throttle.New(100, time.Minute, nil) // every refusal logged
	db, other := secretEntry("db", "5"), secretEntry("other", "1")
	a.onObjectIndex(nil, h.index(1, db))
	a.takeChanged()
	data := map[string][]byte{"password": []byte("hunter2"), "user": []byte("app")}

	_, forger, _ := ed25519.GenerateKey(nil)
	stranger, _ := seal.GenerateKey()
	good := h.object(db, data)
	tampered := []byte(good.payload)
	tampered[len(tampered)-5] ^= 1
	cases := []struct {
		name string
		msg  message
		want string
	}{
		{"another device's", h.objectFor("gw-2", h.device.Public(), h.priv, db, data), `object is for device`},
		{"signed by another key", h.objectFor("gw-1", h.device.Public(), forger, db, data), "does not verify"},
		{"sealed for another key", h.objectFor("gw-1", stranger.Public(), h.priv, db, data), "does not open"},
		{"not in the index", h.object(other, data), "not an entry of the object index"},
		{"another version", h.object(secretEntry("db", "4"), data), "not an entry of the object index"},
		{"tampered", message{good.topic, string(tampered)}, "does not match the signed hash"},
		{"a key that is no file name", h.object(db, map[string][]byte{"../x": []byte("v")}), "key"},
	}
	for _, c := range cases {
		a.onObject(nil, c.msg)
		if _, err := a.Objects().Get(secretRef("db")); !errors.Is(err, objects.ErrPending) || err.Error() != `secret "db" not yet received from the hub` {
			t.Fatalf("%s object: db %v", c.name, err)
		}
		if !strings.Contains(logs.String(), c.want) {
			t.Fatalf("%s object: the log does not say %q:\n%s", c.name, c.want, logs.String())
		}
	}
	if len(a.takeChanged()) != 0 {
		t.Fatal("refused objects told as changes")
	}
	a.onObject(nil, good)
	o, err := a.Objects().Get(secretRef("db"))
	if err != nil || o.UID != "uid-db" || o.ResourceVersion != "5" || o.Type != "Opaque" || string(o.Data["password"]) != "hunter2" || len(o.Data) != 2 {
		t.Fatalf("db: %+v %v", o, err)
	}
	if c := a.takeChanged(); !c[secretRef("db")] || len(c) != 1 {
		t.Fatalf("changes %v", c)
	}
	a.onObject(nil, good) // again: no change
	if c := a.takeChanged(); len(c) != 0 {
		t.Fatalf("the same version again told as a change: %v", c)
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Fatal("a secret's data in the log")
	}
}

// An object dropped from the index is gone from memory and state.db, and
// the daemon hears of it; after a restart the device has what it kept,
// opened from state.db, with no hub.
func TestObjectDropAndRestart(t *testing.T) {
	h := newObjHub(t)
	dir := t.TempDir()
	a, _ := objAgent(t, dir, h, nil)
	cm := protocol.ObjectEntry{Kind: "ConfigMap", Namespace: "default", Name: "app", UID: "uid-app", ResourceVersion: "3", Immutable: true}
	db, tls := secretEntry("db", "1"), secretEntry("tls", "1")
	a.onObjectIndex(nil, h.index(4, cm, db, tls))
	a.onObject(nil, h.object(cm, map[string][]byte{"app.conf": []byte("port=80")}))
	a.onObject(nil, h.object(db, map[string][]byte{"password": []byte("x")}))
	a.onObject(nil, h.object(tls, map[string][]byte{"tls.key": []byte("y")}))
	a.takeChanged()
	a.onObjectIndex(nil, h.index(5, cm, db))
	if _, err := a.Objects().Get(secretRef("tls")); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("tls after its drop: %v", err)
	}
	if c := a.takeChanged(); !c[secretRef("tls")] || len(c) != 1 {
		t.Fatalf("changes %v", c)
	}
	stored, _ := a.store.Objects()
	if len(stored) != 2 || stored["Secret/default/tls"] != nil {
		t.Fatalf("stored after the drop: %d objects", len(stored))
	}
	a.store.Close()

	b, _ := objAgent(t, dir, h, nil)
	o, err := b.Objects().Get(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
	if err != nil || string(o.Data["app.conf"]) != "port=80" || !o.Immutable {
		t.Fatalf("app after a restart: %+v %v", o, err)
	}
	if o, err := b.Objects().Get(secretRef("db")); err != nil || string(o.Data["password"]) != "x" {
		t.Fatalf("db after a restart: %+v %v", o, err)
	}
	if batches, _ := b.pollObjects(time.Now(), true); batches != nil {
		t.Fatalf("asks for %v after a restart, holding everything", names(batches))
	}
	// The generation in force came back too: a replay of index 4 (with
	// tls) is refused.
	b.onObjectIndex(nil, h.index(4, cm, db, tls))
	if batches, _ := b.pollObjects(time.Now(), true); batches != nil {
		t.Fatalf("a replayed older index asks for %v", names(batches))
	}

	// Another sealing key (a device re-enrolled): what was kept does not
	// open, and is asked for again.
	b.store.Close()
	h2 := *h
	h2.device, _ = seal.GenerateKey()
	c, logs := objAgent(t, dir, &h2, nil)
	if _, err := c.Objects().Get(secretRef("db")); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("db opened with another key: %v (want pending: it is asked for again)", err)
	}
	if batches, _ := c.pollObjects(time.Now(), true); len(names(batches)) != 2 {
		t.Fatalf("with another key, asks for %v", names(batches))
	}
	if !strings.Contains(logs.String(), "is not used") {
		t.Fatalf("the log does not say the kept objects are not used:\n%s", logs)
	}
	// Dropped from the index, a row that did not open leaves the disk too.
	c.onObjectIndex(nil, h2.index(6, cm))
	if stored, _ := c.store.Objects(); len(stored) != 1 || stored["ConfigMap/default/app"] == nil {
		t.Fatalf("stored after index 6: %d objects", len(stored))
	}
}

// Nothing of a Secret's data reaches the disk in clear: state.db and its
// WAL hold the sealed message only.
func TestNoSecretInClearOnDisk(t *testing.T) {
	h := newObjHub(t)
	dir := t.TempDir()
	a, logs := objAgent(t, dir, h, nil)
	raw := make([]byte, 16)
	rand.Read(raw)
	marker := "marker-" + hex.EncodeToString(raw)
	db := secretEntry("db", "1")
	a.onObjectIndex(nil, h.index(1, db))
	msg := h.object(db, map[string][]byte{"password": []byte(marker)})
	a.onObject(nil, msg)
	if o, err := a.Objects().Get(secretRef("db")); err != nil || string(o.Data["password"]) != marker {
		t.Fatalf("db: %v", err)
	}
	grep := func(when string, want int) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		seen := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(filepath.Base(f), "state.db") {
				seen++
			}
			if bytes.Contains(b, []byte(marker)) {
				t.Fatalf("%s: the secret is in clear in %s", when, f)
			}
		}
		if seen < want {
			t.Fatalf("%s: %d state.db files (%v), want %d", when, seen, files, want)
		}
	}
	grep("with the WAL", 2)
	// The sealed bytes are stored exactly as received.
	stored, _ := a.store.Objects()
	if len(stored) != 1 || string(stored["Secret/default/db"]) != msg.payload {
		t.Fatal("the stored object is not the message as received")
	}
	a.store.Close() // checkpoints the WAL into state.db
	grep("after a checkpoint", 1)
	if strings.Contains(logs.String(), marker) {
		t.Fatal("the secret is in the log")
	}
}

// Objects over the device's bounds are refused with a clear error; what
// is within them is kept.
func TestObjectBounds(t *testing.T) {
	h := newObjHub(t)
	a, logs := objAgent(t, t.TempDir(), h, func(c *Config) { c.MaxObjects = 3; c.MaxObjectBytes = 100 })
	s1, s2, s3, s4 := secretEntry("s1", "1"), secretEntry("s2", "1"), secretEntry("s3", "1"), secretEntry("s4", "1")
	a.onObjectIndex(nil, h.index(1, s1, s2, s3, s4))
	if !strings.Contains(logs.String(), "objects.maxObjects") || !strings.Contains(logs.String(), "lists 4 objects, over this device's bound of 3") {
		t.Fatalf("the log does not name the bound on objects:\n%s", logs)
	}
	batches, _ := a.pollObjects(time.Unix(0, 0), true)
	if got := strings.Join(names(batches), ","); got != "s1,s2,s3" {
		t.Fatalf("asked for %s, want the first 3", got)
	}
	a.onObject(nil, h.object(s1, map[string][]byte{"k": bytes.Repeat([]byte("a"), 60)}))
	a.onObject(nil, h.object(s2, map[string][]byte{"k": bytes.Repeat([]byte("b"), 60)}))
	a.onObject(nil, h.object(s4, map[string][]byte{"k": []byte("c")}))
	if !strings.Contains(logs.String(), "objects.maxBytes") || !strings.Contains(logs.String(), "over this device's bound of 100") {
		t.Fatalf("the log does not name the bound on bytes:\n%s", logs)
	}
	if _, err := a.Objects().Get(secretRef("s1")); err != nil {
		t.Fatalf("s1 within the bound: %v", err)
	}
	for _, n := range []string{"s2", "s4"} {
		if _, err := a.Objects().Get(secretRef(n)); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("%s over the bound: %v", n, err)
		}
	}
	// The refused version is not asked for again: s3 only.
	batches, _ = a.pollObjects(time.Unix(100, 0), false)
	if got := strings.Join(names(batches), ","); got != "s3" {
		t.Fatalf("retries %s, want s3", got)
	}
	stored, _ := a.store.Objects()
	if len(stored) != 1 {
		t.Fatalf("%d objects stored, want s1 alone", len(stored))
	}
}

// Opening 256 objects of 1 KiB kept in state.db at a start.
func BenchmarkObjectsLoad256(b *testing.B) {
	h := newObjHub(b)
	dir := b.TempDir()
	a, _ := objAgent(b, dir, h, nil)
	var entries []protocol.ObjectEntry
	for i := range 256 {
		entries = append(entries, secretEntry(fmt.Sprintf("s%03d", i), "1"))
	}
	a.onObjectIndex(nil, h.index(1, entries...))
	for _, e := range entries {
		a.onObject(nil, h.object(e, map[string][]byte{"k": bytes.Repeat([]byte("v"), 1024)}))
	}
	a.store.Close()
	for b.Loop() {
		st, err := store.Open(filepath.Join(dir, "state.db"), store.DefaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		a, err := New(Config{Broker: "mqtt://127.0.0.1:1", DeviceID: "gw-1", HubKey: h.pub, SealKey: h.device}, st, nopPods{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.Objects().Get(secretRef("s255")); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}
