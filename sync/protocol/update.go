package protocol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/version"
)

// Update topics: an order to update (hub → device, retained, signed), the
// device's progress and outcome (device → hub, retained), and the transfer
// of an order's artifacts in chunks the device asks for, so that a device
// that reaches only the broker still updates.
const (
	KindUpdate      = "update"       // hub → device, retained, signed: the newest order
	KindUpdateState = "update-state" // device → hub, retained: progress and outcome
	KindFetch       = "fetch"        // device → hub: a request for part of an artifact
	KindChunk       = "chunk"        // hub → device: the part asked for
)

// Kinds of release.
const (
	ReleaseAgent    = "agent"    // podvisor's own binaries, one set per architecture
	ReleaseFirmware = "firmware" // an operating-system bundle for the device's own tool (RAUC, SWUpdate)
)

// Limits of the update documents.
const (
	MaxArtifacts     = 64
	MaxArtifactBytes = 2 << 30 // 2 GiB: an OS bundle, decoded
	MaxChunkBytes    = 128 << 10
	maxChunkHeader   = 1 << 10
	maxVersionLen    = 64
	maxReasonLen     = 1024
	// MaxUpdateStateBytes is what an encoded update report may be: the
	// broker's limit for the retained update-state (a device over it is
	// disconnected).
	MaxUpdateStateBytes = 4 << 10
)

// Release is a release manifest: what `podhub release push` or
// `podhub firmware push` stored, signed with the release key (the hub's
// unless the device config names another). Devices check every artifact
// against it before they install anything.
type Release struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"` // ReleaseAgent or ReleaseFirmware
	// Name is "podvisor" for an agent release, the bundle's name for
	// firmware.
	Name    string    `json:"name"`
	Version string    `json:"version"` // semantic version, v1.2.3 or 1.2.3[-pre]
	Created time.Time `json:"created"`
	// Compatible is what a firmware bundle is built for (RAUC's
	// "compatible"); shown, the device's tool checks it.
	Compatible string     `json:"compatible,omitempty"`
	Artifacts  []Artifact `json:"artifacts"`
}

// Artifact is one file of a release.
type Artifact struct {
	// Name is the file's name in the installed slot (podvisor,
	// podvisor-shim, podvisor-containerd) or the bundle's file name.
	Name string `json:"name"`
	// Arch is the architecture an agent binary is built for: amd64, arm64,
	// armv7, armv6, riscv64, 386. Empty for a firmware bundle.
	Arch   string `json:"arch,omitempty"`
	Size   int64  `json:"size"`   // of the file as installed
	SHA256 string `json:"sha256"` // hex, of the file as installed
	// Encoding is how the file travels: "" (as is) or "gzip". WireSize
	// and WireSHA256 are then of the encoded bytes, so a transfer is
	// checked before it is decoded.
	Encoding   string `json:"encoding,omitempty"`
	WireSize   int64  `json:"wireSize,omitempty"`
	WireSHA256 string `json:"wireSha256,omitempty"`
}

// Transfer is the hash and size of the bytes that travel: what a Fetch
// names and a Chunk carries.
func (a Artifact) Transfer() (sha string, size int64) {
	if a.Encoding != "" {
		return a.WireSHA256, a.WireSize
	}
	return a.SHA256, a.Size
}

// For returns the artifacts of a release meant for arch (every one of a
// firmware release).
func (r *Release) For(arch string) []Artifact {
	var out []Artifact
	for _, a := range r.Artifacts {
		if r.Kind == ReleaseFirmware || a.Arch == arch {
			out = append(out, a)
		}
	}
	return out
}

// Architectures lists the architectures an agent release has binaries for.
func (r *Release) Architectures() []string {
	var out []string
	for _, a := range r.Artifacts {
		if a.Arch != "" && !contains(out, a.Arch) {
			out = append(out, a.Arch)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// AgentArtifacts are the files of an agent release, per architecture;
// podvisor is required, the others are installed where given.
var AgentArtifacts = []string{"podvisor", "podvisor-shim", "podvisor-containerd"}

// KnownArchitectures are those a device may have.
var KnownArchitectures = []string{"amd64", "arm64", "armv7", "armv6", "riscv64", "386"}

// Validate checks a release manifest's fields.
func (r *Release) Validate() error {
	if r.Kind != ReleaseAgent && r.Kind != ReleaseFirmware {
		return fmt.Errorf("release: kind %q, want %s or %s", r.Kind, ReleaseAgent, ReleaseFirmware)
	}
	if err := validName("release: name", r.Name); err != nil {
		return err
	}
	if _, err := ParseVersion(r.Version); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if len(r.Compatible) > 256 {
		return errors.New("release: compatible is over 256 characters")
	}
	if len(r.Artifacts) == 0 || len(r.Artifacts) > MaxArtifacts {
		return fmt.Errorf("release: %d artifacts, want 1 to %d", len(r.Artifacts), MaxArtifacts)
	}
	seen := map[string]bool{}
	hasPodvisor := map[string]bool{}
	for i, a := range r.Artifacts {
		if err := a.validate(r.Kind); err != nil {
			return fmt.Errorf("release: artifacts[%d]: %w", i, err)
		}
		key := a.Arch + "/" + a.Name
		if seen[key] {
			return fmt.Errorf("release: artifacts[%d]: %s for %q appears twice", i, a.Name, a.Arch)
		}
		seen[key] = true
		if a.Name == "podvisor" {
			hasPodvisor[a.Arch] = true
		}
	}
	if r.Kind == ReleaseAgent {
		for _, arch := range r.Architectures() {
			if !hasPodvisor[arch] {
				return fmt.Errorf("release: no podvisor binary for %s", arch)
			}
		}
	} else if len(r.Artifacts) != 1 {
		return fmt.Errorf("release: a firmware release is one bundle, not %d files", len(r.Artifacts))
	}
	return nil
}

func (a Artifact) validate(kind string) error {
	if err := validName("name", a.Name); err != nil {
		return err
	}
	if kind == ReleaseAgent {
		if !contains(AgentArtifacts, a.Name) {
			return fmt.Errorf("name %q: an agent release holds only %s", a.Name, strings.Join(AgentArtifacts, ", "))
		}
		if !contains(KnownArchitectures, a.Arch) {
			return fmt.Errorf("arch %q: want one of %s", a.Arch, strings.Join(KnownArchitectures, ", "))
		}
	} else if a.Arch != "" {
		return errors.New("arch: a firmware bundle has none")
	}
	if a.Size <= 0 || a.Size > MaxArtifactBytes {
		return fmt.Errorf("size %d: want 1 to %d bytes", a.Size, int64(MaxArtifactBytes))
	}
	if !validSHA256(a.SHA256) {
		return fmt.Errorf("sha256 %q: want 64 lower-case hex digits", a.SHA256)
	}
	switch a.Encoding {
	case "":
		if a.WireSize != 0 || a.WireSHA256 != "" {
			return errors.New("wireSize and wireSha256 are only for an encoded artifact")
		}
	case "gzip":
		if a.WireSize <= 0 || a.WireSize > MaxArtifactBytes {
			return fmt.Errorf("wireSize %d: want 1 to %d bytes", a.WireSize, int64(MaxArtifactBytes))
		}
		if !validSHA256(a.WireSHA256) {
			return fmt.Errorf("wireSha256 %q: want 64 lower-case hex digits", a.WireSHA256)
		}
	default:
		return fmt.Errorf("encoding %q: want none or gzip", a.Encoding)
	}
	return nil
}

func validSHA256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// validName accepts a file or release name: 1–128 of [A-Za-z0-9._+-], not
// starting with a dot.
func validName(what, s string) error {
	if len(s) == 0 || len(s) > 128 || s[0] == '.' {
		return fmt.Errorf("%s %q: must be 1 to 128 characters, not starting with a dot", what, s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r)) {
			return fmt.Errorf("%s %q: only letters, digits and . _ + -", what, s)
		}
	}
	return nil
}

// ParseVersion reads a release version: semantic versioning, with or
// without a leading v.
func ParseVersion(s string) (*version.Version, error) {
	if s == "" || len(s) > maxVersionLen {
		return nil, fmt.Errorf("version %q: must be 1 to %d characters", s, maxVersionLen)
	}
	// The parser below allows white space around a version; a version is
	// a slot's directory name on devices and a release's name here.
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return nil, fmt.Errorf("version %q: white space in a version", s)
	}
	v, err := version.ParseSemantic(strings.TrimPrefix(s, "v"))
	if err != nil {
		return nil, fmt.Errorf("version %q: not a semantic version (v1.2.3): %w", s, err)
	}
	return v, nil
}

// CompareVersions compares two release versions: -1, 0 or 1. Either
// being unparsable is an error: a device cannot tell an upgrade from a
// downgrade then.
func CompareVersions(a, b string) (int, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.Compare(vb.String())
}

// Signature contexts: a signature made for one kind of document never
// verifies as another's, though one key may sign them all.
const (
	contextRelease = "podvisor release manifest\n"
	contextOrder   = "podvisor update order\n"
)

// SignedDoc is the envelope of a release manifest or an update order:
// the signature is over a context string and Doc's bytes exactly as they
// appear, so no canonical form is needed.
type SignedDoc struct {
	Schema    int             `json:"schema"`
	Doc       json.RawMessage `json:"doc"`
	KeyID     string          `json:"keyId"`
	Signature []byte          `json:"signature"`
}

func signDoc(context string, v any, key ed25519.PrivateKey) ([]byte, error) {
	if key == nil {
		return nil, errors.New("no signing key")
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	env := SignedDoc{Schema: Schema, Doc: raw, KeyID: KeyID(key.Public().(ed25519.PublicKey)),
		Signature: ed25519.Sign(key, append([]byte(context), raw...))}
	return json.Marshal(env)
}

// openDoc checks an envelope's signature with key and decodes its document
// strictly into v.
func openDoc(what, context string, data []byte, limit int, key ed25519.PublicKey, v any, schema func() int) error {
	var env SignedDoc
	if err := decodeStrict(what, data, limit, &env, func() int { return env.Schema }); err != nil {
		return err
	}
	if len(env.Signature) == 0 || len(env.Doc) == 0 {
		return fmt.Errorf("%s: not signed", what)
	}
	if key == nil {
		return fmt.Errorf("%s: no key to check its signature with", what)
	}
	if !ed25519.Verify(key, append([]byte(context), env.Doc...), env.Signature) {
		return fmt.Errorf("%s: the signature (key %s) does not verify with key %s", what, quote(env.KeyID), KeyID(key))
	}
	return decodeStrict(what, env.Doc, limit, v, schema)
}

// SignRelease validates, encodes and signs a release manifest.
func SignRelease(r Release, key ed25519.PrivateKey) ([]byte, error) {
	r.Schema = Schema
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return signDoc(contextRelease, r, key)
}

// OpenRelease checks a signed release manifest with the release key and
// validates it.
func OpenRelease(data []byte, key ed25519.PublicKey) (*Release, error) {
	var r Release
	if err := openDoc("release manifest", contextRelease, data, MaxMessageBytes, key, &r, func() int { return r.Schema }); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Order tells one device to install a release. The hub publishes the
// newest order retained on the device's update topic; IDs only grow, and
// a device ignores an order older than the last it acted on. An order
// without a release withdraws the previous one (nothing more is started;
// an install under way finishes or fails on its own).
type Order struct {
	Schema int    `json:"schema"`
	Device string `json:"device"`
	ID     int64  `json:"id"`
	// Release is the signed release manifest as pushed, checked by the
	// device with its release key.
	Release json.RawMessage `json:"release,omitempty"`
	// AllowDowngrade lets a device install a version older than the one
	// it runs (podhub update --allow-downgrade).
	AllowDowngrade bool `json:"allowDowngrade,omitempty"`
}

// SignOrder encodes and signs an order with the hub's key.
func SignOrder(o Order, key ed25519.PrivateKey) ([]byte, error) {
	o.Schema = Schema
	return signDoc(contextOrder, o, key)
}

// OpenOrder checks an order with the hub's key and that it is for device.
// Its release is checked separately (OpenRelease), with the release key.
func OpenOrder(data []byte, device string, hub ed25519.PublicKey) (*Order, error) {
	var o Order
	if err := openDoc("update order", contextOrder, data, MaxMessageBytes, hub, &o, func() int { return o.Schema }); err != nil {
		return nil, err
	}
	if o.Device != device {
		return nil, fmt.Errorf("update order is for device %q, this is %q", o.Device, device)
	}
	if o.ID < 1 {
		return nil, fmt.Errorf("update order: id %d, must be 1 or more", o.ID)
	}
	return &o, nil
}

// Phases of an update on a device, as UpdateState reports them.
const (
	UpdateDownloading = "Downloading"
	UpdateVerifying   = "Verifying"
	UpdateInstalling  = "Installing"
	UpdateRestarting  = "Restarting" // agent: the new daemon is starting; firmware: the device reboots
	UpdateCommitted   = "Committed"  // the new version passed its health check
	UpdateFailed      = "Failed"     // refused or failed before the switch; the old version runs on
	UpdateRolledBack  = "RolledBack" // the new version failed its health check; the old one is back
)

var updatePhases = []string{UpdateDownloading, UpdateVerifying, UpdateInstalling, UpdateRestarting, UpdateCommitted, UpdateFailed, UpdateRolledBack}

// Done reports whether a phase is an order's last.
func UpdateDone(phase string) bool {
	return phase == UpdateCommitted || phase == UpdateFailed || phase == UpdateRolledBack
}

// UpdateState is a device's report on its newest order, retained so a hub
// that restarts learns it again.
type UpdateState struct {
	Schema  int       `json:"schema"`
	Device  string    `json:"device"`
	Time    time.Time `json:"time"`
	Order   int64     `json:"order"`
	Kind    string    `json:"kind"`
	Version string    `json:"version"` // the order's release version
	Phase   string    `json:"phase"`
	Percent int       `json:"percent"` // of the phase, 0–100
	// Reason says why an order failed or rolled back, in one line.
	Reason string `json:"reason,omitempty"`
	// Running is the version running now (agent) or the booted bundle's
	// (firmware); Previous the one it replaced or came back to.
	Running  string `json:"running,omitempty"`
	Previous string `json:"previous,omitempty"`
}

// DecodeUpdateState decodes a device's update report strictly.
func DecodeUpdateState(data []byte) (*UpdateState, error) {
	s, err := decodeDoc("update state", data, func(s *UpdateState) int { return s.Schema })
	if err != nil {
		return nil, err
	}
	if !contains(updatePhases, s.Phase) {
		return nil, fmt.Errorf("update state: phase %s, want one of %s", quote(s.Phase), strings.Join(updatePhases, ", "))
	}
	if s.Percent < 0 || s.Percent > 100 {
		return nil, fmt.Errorf("update state: percent %d, want 0 to 100", s.Percent)
	}
	if len(s.Reason) > maxReasonLen || len(s.Version) > maxVersionLen || len(s.Running) > maxVersionLen || len(s.Previous) > maxVersionLen {
		return nil, errors.New("update state: reason or a version is too long")
	}
	if s.Kind != ReleaseAgent && s.Kind != ReleaseFirmware {
		return nil, fmt.Errorf("update state: kind %s, want %s or %s", quote(s.Kind), ReleaseAgent, ReleaseFirmware)
	}
	// Shown to the operator's terminal (get devices, events): no escape
	// sequence, no line break forging another line.
	for _, f := range []*string{&s.Reason, &s.Version, &s.Running, &s.Previous} {
		*f = oneLine(*f)
	}
	return s, nil
}

// oneLine replaces the control characters of a device's text by spaces.
func oneLine(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// Fetch asks the hub for part of an artifact of the device's current
// order, named by its transfer hash (Artifact.Transfer).
type Fetch struct {
	Schema int    `json:"schema"`
	Order  int64  `json:"order"`
	SHA256 string `json:"sha256"`
	Offset int64  `json:"offset"`
	Length int    `json:"length"`
}

// DecodeFetch decodes a fetch request strictly and bounds it.
func DecodeFetch(data []byte) (*Fetch, error) {
	f, err := decodeDoc("fetch", data, func(f *Fetch) int { return f.Schema })
	if err != nil {
		return nil, err
	}
	if !validSHA256(f.SHA256) {
		return nil, fmt.Errorf("fetch: sha256 %s: want 64 lower-case hex digits", quote(f.SHA256))
	}
	if f.Offset < 0 || f.Offset >= MaxArtifactBytes {
		return nil, fmt.Errorf("fetch: offset %d out of range", f.Offset)
	}
	if f.Length < 1 || f.Length > MaxChunkBytes {
		return nil, fmt.Errorf("fetch: length %d, want 1 to %d", f.Length, MaxChunkBytes)
	}
	return f, nil
}

// Chunk is the hub's answer to a Fetch: a JSON header line, then the
// bytes, so that a binary transfer costs no base64.
type Chunk struct {
	Schema int    `json:"schema"`
	Order  int64  `json:"order"`
	SHA256 string `json:"sha256"`
	Offset int64  `json:"offset"`
	// Error says why the hub does not send the part (no such order or
	// artifact, over the rate); then there are no bytes.
	Error string `json:"error,omitempty"`
}

// EncodeChunk writes a chunk: its header, a newline, its bytes.
func EncodeChunk(c Chunk, data []byte) []byte {
	c.Schema = Schema
	h, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("protocol.EncodeChunk: %v", err))
	}
	out := make([]byte, 0, len(h)+1+len(data))
	return append(append(append(out, h...), '\n'), data...)
}

// DecodeChunk splits and checks a chunk; data aliases payload.
func DecodeChunk(payload []byte) (*Chunk, []byte, error) {
	if len(payload) > maxChunkHeader+1+MaxChunkBytes {
		return nil, nil, fmt.Errorf("chunk: %d bytes, over the limit", len(payload))
	}
	i := bytes.IndexByte(payload, '\n')
	if i < 0 || i > maxChunkHeader {
		return nil, nil, errors.New("chunk: no header line")
	}
	var c Chunk
	if err := decodeStrict("chunk", payload[:i], maxChunkHeader, &c, func() int { return c.Schema }); err != nil {
		return nil, nil, err
	}
	data := payload[i+1:]
	if len(data) > MaxChunkBytes {
		return nil, nil, fmt.Errorf("chunk: %d bytes of data, over the %d limit", len(data), MaxChunkBytes)
	}
	if c.Error != "" && len(data) > 0 {
		return nil, nil, errors.New("chunk: an error with data")
	}
	return &c, data, nil
}
