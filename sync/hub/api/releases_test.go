package api

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/protocol"
)

func pushAPI(t *testing.T) (*API, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return &API{Fleet: fleet, HubKey: pub, Releases: releases.Store{Dir: t.TempDir()}, Now: func() time.Time { return time.Unix(1700000000, 0) }}, priv
}

// upload is a push's body: the manifest signed with key, the key's
// public half when sendKey, and the parts given (name -> bytes).
func upload(t *testing.T, rel protocol.Release, key ed25519.PrivateKey, sendKey bool, blobs map[string][]byte) (string, *bytes.Buffer) {
	t.Helper()
	signed, err := protocol.SignRelease(rel, key)
	if err != nil {
		t.Fatal(err)
	}
	body := &bytes.Buffer{}
	mw := multipart.NewWriter(body)
	w, _ := mw.CreateFormField(PartManifest)
	w.Write(signed)
	if sendKey {
		w, _ = mw.CreateFormField(PartKey)
		w.Write(protocol.EncodePublicKey(key.Public().(ed25519.PublicKey)))
	}
	for sha, data := range blobs {
		w, _ = mw.CreateFormFile(PartBlob, sha)
		w.Write(data)
	}
	mw.Close()
	return mw.FormDataContentType(), body
}

func push(t *testing.T, a *API, rel protocol.Release, key ed25519.PrivateKey, sendKey bool, blobs map[string][]byte) (int, string) {
	ctype, body := upload(t, rel, key, sendKey, blobs)
	req := httptest.NewRequest("POST", "/v1/releases", body)
	req.Header.Set("Content-Type", ctype)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func artifact(data []byte) protocol.Artifact {
	sum := sha256.Sum256(data)
	return protocol.Artifact{Name: "podvisor", Arch: "arm64", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func TestReleasePushChecksSignatureAndBytes(t *testing.T) {
	a, hubKey := pushAPI(t)
	data := []byte("the podvisor binary")
	art := artifact(data)
	rel := protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.0.0", Artifacts: []protocol.Artifact{art}}

	// Signed by a key that is neither the hub's nor sent: refused.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	if code, out := push(t, a, rel, other, false, map[string][]byte{art.SHA256: data}); code != http.StatusBadRequest || !strings.Contains(out, "does not verify") {
		t.Fatalf("another key: %d %s", code, out)
	}
	// The wrong bytes, or a part the manifest does not name: refused,
	// nothing stored.
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: []byte("the podvisor binarY")}); code != http.StatusBadRequest || !strings.Contains(out, "hash to") {
		t.Fatalf("wrong bytes: %d %s", code, out)
	}
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{strings.Repeat("b", 64): data}); code != http.StatusBadRequest || !strings.Contains(out, "no artifact of the manifest") {
		t.Fatalf("an extra part: %d %s", code, out)
	}
	if code, out := push(t, a, rel, hubKey, false, nil); code != http.StatusBadRequest || !strings.Contains(out, "not sent") {
		t.Fatalf("no bytes: %d %s", code, out)
	}
	if rs, _ := a.Fleet.Releases(); len(rs) != 0 {
		t.Fatalf("refused pushes stored %d releases", len(rs))
	}
	// The hub's key; then the same version again is refused.
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: data}); code != http.StatusOK {
		t.Fatalf("push: %d %s", code, out)
	}
	if !a.Releases.Has(art.SHA256, art.Size) {
		t.Fatal("the artifact is not stored")
	}
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: data}); code != http.StatusBadRequest || !strings.Contains(out, "release exists") {
		t.Fatalf("again: %d %s", code, out)
	}
	// A separate release key, its public half sent with the push.
	rel.Version = "v1.1.0"
	code, out := push(t, a, rel, other, true, map[string][]byte{art.SHA256: data})
	if code != http.StatusOK || !strings.Contains(out, protocol.KeyID(other.Public().(ed25519.PublicKey))) {
		t.Fatalf("push with a release key: %d %s", code, out)
	}
	// An agent release under another name is refused.
	rel.Name, rel.Version = "other", "v2.0.0"
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: data}); code != http.StatusBadRequest || !strings.Contains(out, "named podvisor") {
		t.Fatalf("another name: %d %s", code, out)
	}
}

// gzipped is data gzip-encoded, as an artifact that travels encoded.
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// An encoded artifact whose bytes do not decode to what the manifest
// says it installs is refused at the push, not rolled out to fail on
// every device after its download: the blob's name (its transfer hash)
// proves only the encoded bytes.
func TestReleasePushChecksDecodedBytes(t *testing.T) {
	a, hubKey := pushAPI(t)
	good := []byte(strings.Repeat("the podvisor binary ", 64))
	art := artifact(good)
	encode := func(art protocol.Artifact, wire []byte) protocol.Artifact {
		sum := sha256.Sum256(wire)
		art.Encoding, art.WireSize, art.WireSHA256 = "gzip", int64(len(wire)), hex.EncodeToString(sum[:])
		return art
	}
	// The wire bytes are a gzip of other bytes than the manifest's.
	evil := gzipped(t, []byte(strings.Repeat("something else entirely", 64)))
	bad := encode(art, evil)
	rel := protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.0.0", Artifacts: []protocol.Artifact{bad}}
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{bad.WireSHA256: evil}); code != http.StatusBadRequest || !strings.Contains(out, "decode to") {
		t.Fatalf("an encoded artifact that decodes to other bytes: %d %s", code, out)
	}
	// Bytes that are no gzip at all.
	junk := []byte("not gzip at all")
	bad = encode(art, junk)
	rel.Artifacts = []protocol.Artifact{bad}
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{bad.WireSHA256: junk}); code != http.StatusBadRequest || !strings.Contains(out, "gzip") {
		t.Fatalf("an encoded artifact that is no gzip: %d %s", code, out)
	}
	// A good release stores the blob; a second manifest naming that blob
	// (not sent again) with other installed bytes is refused too.
	wire := gzipped(t, good)
	ok := encode(art, wire)
	rel.Artifacts = []protocol.Artifact{ok}
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{ok.WireSHA256: wire}); code != http.StatusOK {
		t.Fatalf("a good encoded artifact: %d %s", code, out)
	}
	lie := ok
	lie.Size++
	rel.Version, rel.Artifacts = "v1.1.0", []protocol.Artifact{lie}
	if code, out := push(t, a, rel, hubKey, false, nil); code != http.StatusBadRequest || !strings.Contains(out, "decode to") {
		t.Fatalf("a stored blob named with other installed bytes: %d %s", code, out)
	}
	if rs, _ := a.Fleet.Releases(); len(rs) != 1 {
		t.Fatalf("%d releases stored, want the good one only", len(rs))
	}
}

// A push whose artifacts do not fit on the hub's disk (beside a margin
// for fleet.db) is refused before a byte of them is written: a careless
// push must not fill the disk the fleet database lives on.
func TestReleasePushRefusedWhenTheDiskIsTooSmall(t *testing.T) {
	a, hubKey := pushAPI(t)
	data := []byte("the podvisor binary")
	art := artifact(data)
	rel := protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.0.0", Artifacts: []protocol.Artifact{art}}
	a.Releases.Free = func(string) (int64, error) { return releases.FreeMargin + art.Size - 1, nil }
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: data}); code != http.StatusBadRequest || !strings.Contains(out, "free") {
		t.Fatalf("a push over the free space: %d %s", code, out)
	}
	if a.Releases.Has(art.SHA256, art.Size) {
		t.Fatal("the refused push stored its artifact")
	}
	a.Releases.Free = func(string) (int64, error) { return releases.FreeMargin + art.Size, nil }
	if code, out := push(t, a, rel, hubKey, false, map[string][]byte{art.SHA256: data}); code != http.StatusOK {
		t.Fatalf("a push that fits: %d %s", code, out)
	}
	// Blobs stored already take no more room.
	a.Releases.Free = func(string) (int64, error) { return releases.FreeMargin, nil }
	rel.Version = "v1.0.1"
	if code, out := push(t, a, rel, hubKey, false, nil); code != http.StatusOK {
		t.Fatalf("a push of stored blobs only: %d %s", code, out)
	}
}
