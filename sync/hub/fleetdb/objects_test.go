package fleetdb

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

func openTestFleet(t *testing.T) *Fleet {
	t.Helper()
	f, err := OpenStore(pgtest.Store(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A device's sealing key is pinned: enrolled, or first announced (trust
// on first use); another is refused and kept by fingerprint only;
// enrolling again replaces it and lifts a revocation.
func TestSealKeyPinned(t *testing.T) { pgtest.EachStore(t, testSealKeyPinned) }

func testSealKeyPinned(t *testing.T) {
	f := openTestFleet(t)
	at := time.UnixMilli(1_700_000_000_000)
	k1, k2 := []byte(strings.Repeat("1", 1216)), []byte(strings.Repeat("2", 1216))
	if _, err := f.AnnounceSealKey("ghost", k1, at); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("unknown device: %v", err)
	}
	for _, id := range []string{"old", "new"} {
		if err := f.AddDevice(id); err != nil {
			t.Fatal(err)
		}
	}
	// Enrolled before keys: the first announced is pinned, then only it.
	if pinned, err := f.AnnounceSealKey("old", k1, at); err != nil || !pinned {
		t.Fatalf("first use: pinned %v, %v", pinned, err)
	}
	if pinned, err := f.AnnounceSealKey("old", k1, at); err != nil || pinned {
		t.Fatalf("again: pinned %v, %v", pinned, err)
	}
	if _, err := f.AnnounceSealKey("old", k2, at.Add(time.Minute)); !errors.Is(err, ErrSealKeyMismatch) {
		t.Fatalf("another key: %v", err)
	}
	d, err := f.DeviceObjects("old")
	if err != nil {
		t.Fatal(err)
	}
	if string(d.SealKey) != string(k1) || d.SealKeySource != SealKeyAnnounced || d.RefusedKey != SealKeyPrint(k2) ||
		!d.RefusedAt.Equal(at.Add(time.Minute)) || d.SealKeyFingerprint != SealKeyPrint(k1) {
		t.Fatalf("after a refused key: %+v", d)
	}
	if !strings.HasPrefix(d.RefusedKey, "sha256:") || len(d.RefusedKey) != len("sha256:")+32 {
		t.Fatalf("fingerprint %q", d.RefusedKey)
	}

	// Enrolled with a key: another announced is refused from the start.
	if err := f.EnrolSealKey("new", k2, at); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AnnounceSealKey("new", k1, at); !errors.Is(err, ErrSealKeyMismatch) {
		t.Fatalf("not the enrolled key: %v", err)
	}
	if pub, revoked, err := f.SealingKey("new"); err != nil || revoked || string(pub) != string(k2) {
		t.Fatalf("sealing key %d bytes, revoked %v, %v", len(pub), revoked, err)
	}
	// Revoked, then enrolled again with a new key.
	if err := f.SetRevoked("new", at); err != nil {
		t.Fatal(err)
	}
	if _, revoked, _ := f.SealingKey("new"); !revoked {
		t.Fatal("not revoked")
	}
	if r, _ := f.Revoked(); !r["new"] || r["old"] {
		t.Fatalf("revoked %v", r)
	}
	if err := f.EnrolSealKey("new", k1, at); err != nil {
		t.Fatal(err)
	}
	if pub, revoked, _ := f.SealingKey("new"); revoked || string(pub) != string(k1) {
		t.Fatal("enrolling again kept the revocation or the old key")
	}
	if d, _ := f.DeviceObjects("new"); d.RefusedKey != "" || d.SealKeySource != SealKeyEnrolled {
		t.Fatalf("enrolled again: %+v", d)
	}
	if _, _, err := f.SealingKey("ghost"); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("unknown device: %v", err)
	}
}

// An index's generation only grows; the key survives it.
func TestObjectIndexGenerations(t *testing.T) { pgtest.EachStore(t, testObjectIndexGenerations) }

func testObjectIndexGenerations(t *testing.T) {
	f := openTestFleet(t)
	if err := f.AddDevice("gw"); err != nil {
		t.Fatal(err)
	}
	if err := f.EnrolSealKey("gw", []byte("k"), time.Now()); err != nil {
		t.Fatal(err)
	}
	e := []protocol.ObjectEntry{{Kind: "ConfigMap", Namespace: "default", Name: "app", UID: "u", ResourceVersion: "1"}}
	if err := f.SaveObjectIndex("gw", 2, e, []byte("doc"), nil); err == nil {
		t.Fatal("generation 2 stored before 1")
	}
	if err := f.SaveObjectIndex("gw", 1, e, []byte("doc1"), []string{"left out"}); err != nil {
		t.Fatal(err)
	}
	if err := f.SaveObjectIndex("gw", 1, nil, []byte("doc1"), nil); err == nil {
		t.Fatal("generation 1 stored twice")
	}
	if err := f.SaveObjectIndex("other", 1, nil, []byte("doc"), nil); err != nil {
		t.Fatal(err)
	}
	all, err := f.ObjectIndexes()
	if err != nil {
		t.Fatal(err)
	}
	d := all["gw"]
	if d.Generation != 1 || len(d.Entries) != 1 || !d.Entries[0].Same(e[0]) || string(d.Document) != "doc1" ||
		len(d.Omitted) != 1 || len(all) != 2 {
		t.Fatalf("stored %+v (of %d)", d, len(all))
	}
	if err := f.SaveOmitted("gw", nil); err != nil {
		t.Fatal(err)
	}
	if d, _ := f.DeviceObjects("gw"); len(d.Omitted) != 0 || d.Generation != 1 {
		t.Fatalf("after SaveOmitted: %+v", d)
	}
}
