package protocol

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

func testRelease() Release {
	sha := strings.Repeat("ab", 32)
	return Release{Kind: ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Artifacts: []Artifact{
		{Name: "podvisor", Arch: "arm64", Size: 10, SHA256: sha},
		{Name: "podvisor-shim", Arch: "arm64", Size: 5, SHA256: sha, Encoding: "gzip", WireSize: 3, WireSHA256: strings.Repeat("cd", 32)},
		{Name: "podvisor", Arch: "amd64", Size: 10, SHA256: sha},
	}}
}

func TestReleaseSignatureAndContext(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	signed, err := SignRelease(testRelease(), priv)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRelease(signed, pub)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.For("arm64"); len(got) != 2 {
		t.Errorf("For(arm64) = %d artifacts, want 2", len(got))
	}
	if sha, size := r.For("arm64")[1].Transfer(); sha != strings.Repeat("cd", 32) || size != 3 {
		t.Errorf("Transfer of a gzip artifact = %s %d, want the wire hash and size", sha, size)
	}
	if _, err := OpenRelease(signed, other); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("another key: err = %v, want a signature error", err)
	}
	// The same key signs orders: a release envelope must not open as an
	// order, nor the other way round.
	order, _ := SignOrder(Order{Device: "d1", ID: 1, Release: signed}, priv)
	if _, err := OpenRelease(order, pub); err == nil {
		t.Error("an order opened as a release manifest")
	}
	if _, err := OpenOrder(signed, "d1", pub); err == nil {
		t.Error("a release manifest opened as an order")
	}
	o, err := OpenOrder(order, "d1", pub)
	if err != nil || o.ID != 1 {
		t.Fatalf("OpenOrder = %+v, %v", o, err)
	}
	if _, err := OpenOrder(order, "d2", pub); err == nil || !strings.Contains(err.Error(), `for device "d1"`) {
		t.Errorf("order for another device: err = %v", err)
	}
	// A changed byte in the document breaks the signature.
	var env SignedDoc
	json.Unmarshal(signed, &env)
	env.Doc = []byte(strings.Replace(string(env.Doc), "v1.2.0", "v9.2.0", 1))
	forged, _ := json.Marshal(env)
	if _, err := OpenRelease(forged, pub); err == nil {
		t.Error("a forged version verified")
	}
}

func TestReleaseValidation(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	for name, mutate := range map[string]func(*Release){
		"bad version":      func(r *Release) { r.Version = "latest" },
		"unknown arch":     func(r *Release) { r.Artifacts[0].Arch = "sparc" },
		"unknown file":     func(r *Release) { r.Artifacts[0].Name = "evil" },
		"path in name":     func(r *Release) { r.Artifacts[0].Name = "../podvisor" },
		"bad hash":         func(r *Release) { r.Artifacts[0].SHA256 = "00" },
		"duplicate":        func(r *Release) { r.Artifacts[2].Arch = "arm64" },
		"no podvisor":      func(r *Release) { r.Artifacts[1].Arch = "riscv64" },
		"unknown encoding": func(r *Release) { r.Artifacts[1].Encoding = "zstd" },
		"zero size":        func(r *Release) { r.Artifacts[0].Size = 0 },
	} {
		r := testRelease()
		mutate(&r)
		if _, err := SignRelease(r, priv); err == nil {
			t.Errorf("%s: signed, want a validation error", name)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"v1.2.3", "1.2.3", 0}, {"v1.10.0", "v1.9.9", 1}, {"v1.0.0-rc.1", "v1.0.0", -1}, {"v0.9.0", "v1.0.0", -1}} {
		got, err := CompareVersions(c.a, c.b)
		if err != nil || got != c.want {
			t.Errorf("CompareVersions(%s, %s) = %d, %v; want %d", c.a, c.b, got, err, c.want)
		}
	}
	if _, err := CompareVersions("145b175", "v1.0.0"); err == nil {
		t.Error("a commit hash compared as a version")
	}
}

func TestChunkFrame(t *testing.T) {
	data := []byte{0, '\n', 1, 2, 255}
	c, got, err := DecodeChunk(EncodeChunk(Chunk{Order: 3, SHA256: strings.Repeat("ab", 32), Offset: 7}, data))
	if err != nil || c.Order != 3 || c.Offset != 7 || string(got) != string(data) {
		t.Fatalf("DecodeChunk = %+v %v %v", c, got, err)
	}
	if _, _, err := DecodeChunk(append(EncodeChunk(Chunk{}, nil), make([]byte, MaxChunkBytes+1)...)); err == nil {
		t.Error("an oversized chunk decoded")
	}
	if _, _, err := DecodeChunk([]byte("no header")); err == nil {
		t.Error("a chunk without a header line decoded")
	}
}

func TestDecodeFetchAndState(t *testing.T) {
	ok := Encode(&Fetch{Order: 1, SHA256: strings.Repeat("ab", 32), Offset: 0, Length: MaxChunkBytes})
	if _, err := DecodeFetch(ok); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeFetch(Encode(&Fetch{Order: 1, SHA256: strings.Repeat("ab", 32), Length: MaxChunkBytes + 1})); err == nil {
		t.Error("an oversized fetch decoded")
	}
	if _, err := DecodeUpdateState(Encode(&UpdateState{Device: "d", Kind: ReleaseAgent, Phase: "Exploded"})); err == nil {
		t.Error("an unknown phase decoded")
	}
	s, err := DecodeUpdateState(Encode(&UpdateState{Device: "d", Kind: ReleaseAgent, Phase: UpdateRolledBack, Reason: "r"}))
	if err != nil || !UpdateDone(s.Phase) {
		t.Errorf("DecodeUpdateState = %+v, %v", s, err)
	}
}

// A refusal quotes what it refuses, and refusals are logged (by the hub,
// by the device): attacker text in them is bounded, whatever the message's
// size. An order's envelope (its key ID, its unknown fields) is not
// covered by the signature, nor is anything of an update report or a
// fetch.
func TestRefusalsQuoteAttackerTextBounded(t *testing.T) {
	const limit = 1 << 10
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	long := strings.Repeat("x", 100<<10)
	signed, err := SignOrder(Order{Device: "gw-1", ID: 1}, key)
	if err != nil {
		t.Fatal(err)
	}
	var env SignedDoc
	json.Unmarshal(signed, &env)
	env.KeyID = long
	withKeyID, _ := json.Marshal(env)
	unknown := []byte(`{"schema":1,"doc":{},"keyId":"k","signature":"AA==","` + long + `":1}`)
	cases := map[string]func() error{
		"an order's key id": func() error { _, err := OpenOrder(withKeyID, "gw-1", other); return err },
		"an order's unknown field": func() error {
			_, err := OpenOrder(unknown, "gw-1", other)
			return err
		},
		"a report's phase": func() error {
			_, err := DecodeUpdateState([]byte(`{"schema":1,"device":"gw-1","order":1,"kind":"agent","phase":"` + long + `"}`))
			return err
		},
		"a report's kind": func() error {
			_, err := DecodeUpdateState([]byte(`{"schema":1,"device":"gw-1","order":1,"kind":"` + long + `","phase":"Failed"}`))
			return err
		},
		"a fetch's hash": func() error {
			_, err := DecodeFetch([]byte(`{"schema":1,"order":1,"sha256":"` + long + `","offset":0,"length":1}`))
			return err
		},
	}
	for name, refuse := range cases {
		err := refuse()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if len(err.Error()) > limit {
			t.Errorf("%s: a refusal of %d bytes (%.80s...), want at most %d", name, len(err.Error()), err.Error(), limit)
		}
	}
}

// A release version names the slot directory a device installs it in
// and the release an operator updates to: the semantic-version parser
// underneath accepts white space around it (a newline included), which
// must not make a second name for one version nor a slot name with a
// line break.
func TestParseVersionRefusesWhiteSpace(t *testing.T) {
	for _, v := range []string{" v1.2.3", "v1.2.3 ", "1.2.3\n", "\tv1.2.3", "v1.2.3\r\n"} {
		if _, err := ParseVersion(v); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
	r := testRelease()
	r.Version = "v1.2.3\n"
	if err := r.Validate(); err == nil {
		t.Error("a release with version \"v1.2.3\\n\" validated")
	}
}

// A device's report is shown to the operator (podhub get devices,
// describe device, the events): its text reaches a terminal, so control
// characters (an escape sequence, a line break forging another line)
// are replaced by spaces.
func TestUpdateStateTextHasNoControlCharacters(t *testing.T) {
	s, err := DecodeUpdateState([]byte(`{"schema":1,"device":"gw-1","order":1,"kind":"agent","phase":"Failed",` +
		`"reason":"bad\u001b[2J\nFAKE LINE\r\u0007\u009b31m","version":"v1\u001b]0;x\u0007","running":"v1\n","previous":"v0\t"}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"reason": s.Reason, "version": s.Version, "running": s.Running, "previous": s.Previous} {
		if i := strings.IndexFunc(text, unicode.IsControl); i >= 0 {
			t.Errorf("%s %q keeps a control character at %d", name, text, i)
		}
	}
	if s.Reason != "bad [2J FAKE LINE   31m" {
		t.Errorf("reason %q", s.Reason)
	}
}
