package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// fakeHub serves artifacts by transfer hash and records reports: the
// transport's contract, in memory.
type fakeHub struct {
	mu      sync.Mutex
	files   map[string][]byte // transfer sha → bytes
	reports []protocol.UpdateState
	// cut, when set, makes a download stop half-way with this error.
	cut       error
	downloads int
	sent      int64 // bytes written to downloads
}

func (h *fakeHub) Download(ctx context.Context, order int64, a protocol.Artifact, dest string, progress func(int64)) error {
	sha, size := a.Transfer()
	h.mu.Lock()
	data, ok := h.files[sha]
	cut := h.cut
	h.downloads++
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("hub has no artifact %s", sha)
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, _ := f.Stat()
	off := st.Size()
	if off > int64(len(data)) {
		off = 0
		f.Truncate(0)
	}
	half := int64(len(data)) / 2
	for off < int64(len(data)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(off+4096, int64(len(data)))
		if off < half && end >= half {
			end = half
		}
		if _, err := f.WriteAt(data[off:end], off); err != nil {
			return err
		}
		h.mu.Lock()
		h.sent += end - off
		h.mu.Unlock()
		off = end
		progress(off)
		if off == half {
			f.Sync()
			crashPoint("download")
			if cut != nil {
				return cut
			}
		}
	}
	_ = size // a faulty transport: the updater checks what it got
	return nil
}

func (h *fakeHub) Report(s protocol.UpdateState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reports = append(h.reports, s)
}

func (h *fakeHub) last() protocol.UpdateState {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reports) == 0 {
		return protocol.UpdateState{}
	}
	return h.reports[len(h.reports)-1]
}

// release is a signed agent release for tests, with its files.
type release struct {
	key   ed25519.PrivateKey
	rel   protocol.Release
	files map[string][]byte // name → installed bytes
	hub   *fakeHub
}

func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newRelease makes release version for arch: podvisor gzip-encoded
// (size bytes), podvisor-shim as is; files come from seed.
func newRelease(t testing.TB, hub *fakeHub, version, arch string, size int, seed uint64) *release {
	t.Helper()
	r := &release{key: testKey(1), files: map[string][]byte{}, hub: hub,
		rel: protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: version, Created: time.Unix(1e9, 0).UTC()}}
	rng := rand.New(rand.NewPCG(seed, seed))
	for i, name := range []string{"podvisor", "podvisor-shim"} {
		data := make([]byte, size/(i+1))
		for j := range data {
			data[j] = byte(rng.IntN(16)) // compressible, not trivially
		}
		r.files[name] = data
		a := protocol.Artifact{Name: name, Arch: arch, Size: int64(len(data)), SHA256: sum(data)}
		wire := data
		if name == "podvisor" {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(data)
			zw.Close()
			wire = b.Bytes()
			a.Encoding, a.WireSize, a.WireSHA256 = "gzip", int64(len(wire)), sum(wire)
		}
		if hub != nil {
			hub.mu.Lock()
			if hub.files == nil {
				hub.files = map[string][]byte{}
			}
			sha, _ := a.Transfer()
			hub.files[sha] = wire
			hub.mu.Unlock()
		}
		r.rel.Artifacts = append(r.rel.Artifacts, a)
	}
	return r
}

// order signs the release into an order.
func (r *release) order(t testing.TB, id int64) *protocol.Order {
	t.Helper()
	signed, err := protocol.SignRelease(r.rel, r.key)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.Order{Schema: protocol.Schema, Device: "dev1", ID: id, Release: signed}
}

// newUpdater is an updater on dataDir for a device running version.
func newUpdater(dataDir, version string, hub *fakeHub) *Updater {
	var tr Transport
	if hub != nil {
		tr = hub
	}
	return New(Options{DataDir: dataDir, Device: "dev1", Version: version, Arch: "arm64",
		ReleaseKey: testKey(1).Public().(ed25519.PublicKey), Transport: tr, CommitTimeout: time.Minute,
		Containers: func() []Container { return nil }})
}

// installed checks that the current slot is release r, complete: every
// file's bytes as the release says, and slot.json naming them.
func assertCurrentIs(t *testing.T, dataDir string, r *release, state string) *Slot {
	t.Helper()
	cur, err := NewLayout(dataDir).Linked(linkCurrent)
	if err != nil || cur == nil {
		t.Fatalf("current slot: %v, %v", cur, err)
	}
	if cur.Record.Version != r.rel.Version || cur.Record.State != state {
		t.Fatalf("current slot %s is %s %s, want %s %s", cur.Name, cur.Record.Version, cur.Record.State, r.rel.Version, state)
	}
	for name, data := range r.files {
		got, err := os.ReadFile(filepath.Join(cur.Dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("slot %s: %s differs from the release (%v)", cur.Name, name, err)
		}
	}
	return cur
}

// assertNoCurrent checks the device runs its factory binary.
func assertNoCurrent(t *testing.T, dataDir string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dataDir, "agent", "current")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("current exists (%v); want the factory binary", err)
	}
}
