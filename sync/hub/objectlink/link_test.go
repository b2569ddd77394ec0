package objectlink

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
)

// sent is what the link published.
type sent struct {
	mu   sync.Mutex
	msgs []msg
}

type msg struct {
	topic    string
	retained bool
	payload  []byte
}

func (s *sent) publish(topic string, retained bool, payload []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, msg{topic, retained, bytes.Clone(payload)})
}

func (s *sent) take() []msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.msgs
	s.msgs = nil
	return out
}

type source struct{ store }

func (s source) Get(r objects.Ref) (*objects.Object, error) {
	if o := s.store[r]; o != nil {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

type linkRig struct {
	t     testing.TB
	fleet *fleetdb.Fleet
	link  *Link
	out   *sent
	src   store
	pub   ed25519.PublicKey
	priv  ed25519.PrivateKey
	now   time.Time
	logs  *bytes.Buffer
	dir   string
}

// newLinkRig is a link over a fleet, with a fake clock, whose loops do
// not run: the test calls update and answer itself.
func newLinkRig(t testing.TB, lim Limits) *linkRig {
	r := &linkRig{t: t, out: &sent{}, src: store{}, now: time.Unix(1_700_000_000, 0), logs: &bytes.Buffer{}, dir: t.TempDir()}
	r.pub, r.priv, _ = ed25519.GenerateKey(nil)
	r.open(lim)
	return r
}

func (r *linkRig) open(lim Limits) {
	var err error
	if r.fleet, err = fleetdb.Open(filepath.Join(r.dir, "fleet.db")); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { r.fleet.Close() })
	r.link = New(Config{Key: r.priv, Source: source{r.src}, Limits: lim, Now: func() time.Time { return r.now }},
		r.fleet, r.out.publish, slog.New(slog.NewTextHandler(r.logs, nil)))
}

func (r *linkRig) device(id string) *seal.PrivateKey {
	if err := r.fleet.AddDevice(id); err != nil {
		r.t.Fatal(err)
	}
	k, err := seal.GenerateKey()
	if err != nil {
		r.t.Fatal(err)
	}
	return k
}

func announce(t *testing.T, l *Link, id string, k *seal.PrivateKey) {
	msg, err := protocol.EncodeSealKey(id, k.Public().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	l.SealKey(id, msg)
}

func (r *linkRig) pods(dev string, pods ...string) {
	var raw []json.RawMessage
	for _, p := range pods {
		raw = append(raw, json.RawMessage(p))
	}
	// Stored as the device link stores them, then handed over.
	cur, err := r.fleet.Desired(dev)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.fleet.SaveDesired(fleetdb.DesiredDoc{Device: dev, Generation: cur.Generation + 1, Pods: raw, Document: []byte("{}")}); err != nil {
		r.t.Fatal(err)
	}
	r.link.DesiredChanged(dev, raw)
}

// flush computes every marked device's index, as the indexer does.
func (r *linkRig) flush() {
	r.link.mu.Lock()
	dirty := r.link.dirty
	r.link.dirty = map[string]bool{}
	r.link.mu.Unlock()
	if r.link.pass(dirty) {
		r.t.Fatal("a pass failed")
	}
}

func (r *linkRig) ask(dev string, entries ...protocol.ObjectEntry) {
	g := &protocol.ObjectGet{Refs: entries}
	r.link.answer(dev, g)
}

func volumePod(name string, cms ...string) string {
	var vols []string
	for _, c := range cms {
		vols = append(vols, fmt.Sprintf(`{"name":%q,"configMap":{"name":%q}}`, c, c))
	}
	return fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"volumes":[%s],"containers":[{"name":"c","image":"i"}]}}`, name, strings.Join(vols, ","))
}

// The index's generation only grows, survives a restart, and moves only
// when the entries do.
func TestIndexGenerationsAndRestart(t *testing.T) {
	r := newLinkRig(t, DefaultLimits)
	r.device("gw")
	r.src.put(objects.ConfigMap, "default", "app", "1", 10)
	r.pods("gw", volumePod("web", "app"))
	r.flush()
	msgs := r.out.take()
	if len(msgs) != 1 || !msgs[0].retained || msgs[0].topic != "podvisor/v1/devices/gw/objects" {
		t.Fatalf("published %+v", msgs)
	}
	ix, err := protocol.OpenObjectIndex(msgs[0].payload, "gw", r.pub)
	if err != nil || ix.Generation != 1 || len(ix.Entries) != 1 {
		t.Fatalf("index %+v %v", ix, err)
	}
	// Another pod using the same object: the same entries, nothing new.
	r.pods("gw", volumePod("web", "app"), volumePod("web2", "app"))
	r.flush()
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("published %d with the same entries", len(msgs))
	}
	// A device that never had objects is sent no empty index.
	r.device("bare")
	r.pods("bare", volumePod("web"))
	r.flush()
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("published %+v for a device without objects", msgs)
	}

	// Restarted: the same objects make no new generation; a changed one
	// makes generation 2.
	r.fleet.Close()
	r.open(DefaultLimits)
	if err := r.link.Start(); err != nil {
		t.Fatal(err)
	}
	r.link.Close() // the loops stop; the state stays
	r.flush()
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("after a restart, published %d with the same entries: %s %s", len(msgs), msgs[0].topic, msgs[0].payload)
	}
	r.src.put(objects.ConfigMap, "default", "app", "2", 10)
	r.link.ObjectChanged(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
	r.flush()
	msgs = r.out.take()
	if len(msgs) != 1 {
		t.Fatalf("published %d", len(msgs))
	}
	if ix, _ := protocol.OpenObjectIndex(msgs[0].payload, "gw", r.pub); ix.Generation != 2 || ix.Entries[0].ResourceVersion != "2" {
		t.Fatalf("index %+v", ix)
	}
	// An object no device uses changes nothing.
	r.link.ObjectChanged(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "other"})
	r.flush()
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("published %d", len(msgs))
	}
	// Connected publishes every stored index again.
	r.link.Connected()
	if msgs := r.out.take(); len(msgs) != 1 || !msgs[0].retained {
		t.Fatalf("connected: %+v", msgs)
	}
}

// Over the bounds, the excess is left out, shown and warned of once.
func TestBoundsShownAndWarned(t *testing.T) {
	r := newLinkRig(t, Limits{MaxObjects: 1, MaxBytes: 1 << 20})
	r.device("gw")
	r.src.put(objects.ConfigMap, "default", "a", "1", 10)
	r.src.put(objects.ConfigMap, "default", "b", "1", 10)
	r.pods("gw", volumePod("web", "a", "b"))
	r.flush()
	d, err := r.fleet.DeviceObjects("gw")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Entries) != 1 || len(d.Omitted) != 1 || !strings.Contains(d.Omitted[0], "ConfigMap default/b: over the device's limit of 1 objects") {
		t.Fatalf("stored %+v", d)
	}
	r.pods("gw", volumePod("web", "a", "b"), volumePod("web2", "a"))
	r.flush()
	events, _ := r.fleet.Events("gw")
	if len(events) != 1 || events[0].Type != "Warning" || events[0].Reason != "ObjectsOverLimit" || !strings.Contains(events[0].Message, "default/b") {
		t.Fatalf("events %+v", events)
	}
	// Back within bounds: nothing left out.
	r.pods("gw", volumePod("web", "a"))
	r.flush()
	if d, _ := r.fleet.DeviceObjects("gw"); len(d.Omitted) != 0 {
		t.Fatalf("omitted %v", d.Omitted)
	}
}

// Requests: only index entries, only with a pinned key, sealed for that
// key, within the device's budget; another key announced is refused by
// fingerprint and never logged.
func TestAnswers(t *testing.T) {
	r := newLinkRig(t, Limits{MaxObjects: 10, MaxBytes: 64 << 10})
	ka, kb := r.device("gw-a"), r.device("gw-b")
	r.src.put(objects.ConfigMap, "default", "a", "1", 10)
	r.src.put(objects.ConfigMap, "default", "big", "1", 40<<10)
	r.pods("gw-a", volumePod("web", "a", "big"))
	r.flush()
	r.out.take()
	_, entries := r.link.Index("gw-a")

	r.ask("gw-a", entries...)
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("no key known, yet %d answers", len(msgs))
	}
	announce(t, r.link, "gw-a", ka)
	r.ask("gw-a", entries[0])
	msgs := r.out.take()
	if len(msgs) != 1 || msgs[0].retained || msgs[0].topic != "podvisor/v1/devices/gw-a/object" {
		t.Fatalf("answers %+v", msgs)
	}
	h, sealed, err := protocol.OpenObject(msgs[0].payload, "gw-a", r.pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Open(protocol.SealInfo("gw-a", h.Entry), sealed); err != nil {
		t.Fatalf("A's key: %v", err)
	}
	if _, err := kb.Open(protocol.SealInfo("gw-a", h.Entry), sealed); err == nil {
		t.Fatal("B's key opened A's object")
	}

	// B asks for A's objects: refused and counted, nothing sent.
	announce(t, r.link, "gw-b", kb)
	r.ask("gw-b", entries...)
	if msgs := r.out.take(); len(msgs) != 0 || r.link.Denied() != 2 {
		t.Fatalf("B got %d, %d denied", len(msgs), r.link.Denied())
	}

	// The budget: 64 KiB at once, 1 MiB a second; big costs 40 KiB.
	r.ask("gw-a", entries[1])
	r.ask("gw-a", entries[1])
	if msgs := r.out.take(); len(msgs) != 1 {
		t.Fatalf("%d answers within a budget for one", len(msgs))
	}
	r.now = r.now.Add(time.Second)
	r.ask("gw-a", entries[1])
	if msgs := r.out.take(); len(msgs) != 1 {
		t.Fatalf("%d answers a second later", len(msgs))
	}

	// Another key for A: refused, shown by fingerprint, never logged.
	other, _ := seal.GenerateKey()
	announce(t, r.link, "gw-a", other)
	d, _ := r.fleet.DeviceObjects("gw-a")
	if d.RefusedKey != fleetdb.SealKeyPrint(other.Public().Bytes()) || d.SealKeyFingerprint != fleetdb.SealKeyPrint(ka.Public().Bytes()) {
		t.Fatalf("after another key: %+v", d)
	}
	if !strings.Contains(r.logs.String(), d.RefusedKey) {
		t.Fatalf("the refusal is not logged by fingerprint:\n%s", r.logs)
	}
	// No key bytes in the log, in any encoding json or slog would use.
	pub := other.Public().Bytes()
	b64, _ := json.Marshal(pub)
	if strings.Contains(r.logs.String(), strings.Trim(string(b64), `"`)[:40]) || bytes.Contains(r.logs.Bytes(), pub[:32]) {
		t.Fatal("key bytes in the log")
	}
	// A key announced under another device's topic is refused.
	msg, _ := protocol.EncodeSealKey("gw-b", other.Public().Bytes())
	r.link.SealKey("gw-a", msg)
	if events, _ := r.fleet.Events("gw-a"); !strings.Contains(events[len(events)-1].Message, `names device "gw-b"`) {
		t.Fatalf("events %+v", events)
	}
	// Still sealed for the pinned key.
	r.ask("gw-a", entries[0])
	msgs = r.out.take()
	h, sealed, _ = protocol.OpenObject(msgs[0].payload, "gw-a", r.pub)
	if _, err := ka.Open(protocol.SealInfo("gw-a", h.Entry), sealed); err != nil {
		t.Fatal("no longer sealed for the pinned key")
	}
	// Revoked: nothing.
	if err := r.fleet.SetRevoked("gw-a", r.now); err != nil {
		t.Fatal(err)
	}
	r.ask("gw-a", entries[0])
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatal("a revoked device was answered")
	}
}

// failing is a source that cannot read (a database error, not a missing
// object).
type failing struct{}

func (failing) Get(objects.Ref) (*objects.Object, error) { return nil, errors.New("disk I/O error") }

// An object that cannot be read leaves the index as it was (not
// computed from a guess, which would drop the object at the device) and
// the device marked, for the next pass.
func TestUnreadableObjectKeepsTheIndex(t *testing.T) {
	r := newLinkRig(t, DefaultLimits)
	r.device("gw")
	r.src.put(objects.ConfigMap, "default", "app", "1", 10)
	r.pods("gw", volumePod("web", "app"))
	r.flush()
	r.out.take()
	r.link.cfg.Source = failing{}
	r.link.ObjectChanged(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
	r.link.mu.Lock()
	dirty := r.link.dirty
	r.link.dirty = map[string]bool{}
	r.link.mu.Unlock()
	if !r.link.pass(dirty) {
		t.Fatal("the pass did not fail")
	}
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("published %d from an unreadable source", len(msgs))
	}
	if gen, entries := r.link.Index("gw"); gen != 1 || len(entries) != 1 {
		t.Fatalf("index generation %d, %d entries", gen, len(entries))
	}
	r.link.cfg.Source = source{r.src}
	r.src.put(objects.ConfigMap, "default", "app", "2", 10)
	r.flush() // the device is still marked
	if msgs := r.out.take(); len(msgs) != 1 {
		t.Fatalf("published %d once readable", len(msgs))
	}
}
