package protocol

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Object topics: the ConfigMaps and Secrets a device's pods reference.
// The hub keeps, retained, an index of exactly those objects (the Node
// authorizer's rule: a device learns of nothing its pods do not use); the
// device asks for the entries it lacks and gets each object signed by the
// hub with its data sealed for that one device (sync/seal). The device's
// sealing key reaches the hub on seal-key.
const (
	KindObjects   = "objects"    // hub → device, retained, signed: the index
	KindObjectGet = "object-get" // device → hub: the entries it lacks
	KindObject    = "object"     // hub → device: one object, signed, data sealed
	KindSealKey   = "seal-key"   // device → hub, retained: its public sealing key
)

// Limits of the object documents.
const (
	// MaxObjectEntries bounds an index: more objects than a device could
	// be configured to take.
	MaxObjectEntries = 4096
	// MaxObjectGetRefs bounds one request; a device asks again for more.
	MaxObjectGetRefs = 64
	// MaxObjectMessageBytes bounds an object message: the API server's
	// 1 MiB of data, the sealing's overhead and the header, under the
	// broker's packet limit (packaging/mosquitto: max_packet_size).
	MaxObjectMessageBytes = 1<<20 + 40<<10
	maxObjectGetBytes     = 16 << 10
	maxSealKeyBytes       = 4 << 10
	maxUIDLen             = 128
	maxResourceVersionLen = 64
)

// ObjectEntry names one version of an object.
type ObjectEntry struct {
	Kind            string `json:"kind"` // ConfigMap or Secret
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	// Immutable objects never change: a device that has this UID keeps it.
	Immutable bool `json:"immutable,omitempty"`
}

// Key is the entry's kind/namespace/name.
func (e ObjectEntry) Key() string { return e.Kind + "/" + e.Namespace + "/" + e.Name }

// Same tells whether two entries name the same version of one object.
func (e ObjectEntry) Same(o ObjectEntry) bool {
	return e.Key() == o.Key() && e.UID == o.UID && e.ResourceVersion == o.ResourceVersion
}

func (e ObjectEntry) validate() error {
	if e.Kind != "ConfigMap" && e.Kind != "Secret" {
		return fmt.Errorf("kind %s, want ConfigMap or Secret", quote(e.Kind))
	}
	if msgs := validation.IsDNS1123Label(e.Namespace); len(msgs) > 0 {
		return fmt.Errorf("namespace %s: %s", quote(e.Namespace), msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(e.Name); len(msgs) > 0 {
		return fmt.Errorf("name %s: %s", quote(e.Name), msgs[0])
	}
	if e.UID == "" || len(e.UID) > maxUIDLen || !printable(e.UID) {
		return fmt.Errorf("%s: uid %s: want 1 to %d printable characters", e.Key(), quote(e.UID), maxUIDLen)
	}
	if e.ResourceVersion == "" || len(e.ResourceVersion) > maxResourceVersionLen || !printable(e.ResourceVersion) {
		return fmt.Errorf("%s: resourceVersion %s: want 1 to %d printable characters", e.Key(), quote(e.ResourceVersion), maxResourceVersionLen)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ObjectIndex is every object a device's pods reference, at a generation
// that only grows: the device keeps these and drops any other.
type ObjectIndex struct {
	Schema     int           `json:"schema"`
	Device     string        `json:"device"`
	Generation int64         `json:"generation"`
	Entries    []ObjectEntry `json:"entries"`
}

// Signature contexts of the object documents.
const (
	contextObjectIndex = "podvisor object index\n"
	contextObject      = "podvisor object\n"
)

func (ix *ObjectIndex) validate() error {
	if ix.Generation < 1 {
		return fmt.Errorf("generation %d, must be 1 or more", ix.Generation)
	}
	if len(ix.Entries) > MaxObjectEntries {
		return fmt.Errorf("%d entries, over the limit of %d", len(ix.Entries), MaxObjectEntries)
	}
	seen := make(map[string]bool, len(ix.Entries))
	for i, e := range ix.Entries {
		if err := e.validate(); err != nil {
			return fmt.Errorf("entries[%d]: %w", i, err)
		}
		if seen[e.Key()] {
			return fmt.Errorf("entries[%d]: %s listed twice", i, e.Key())
		}
		seen[e.Key()] = true
	}
	return nil
}

// SignObjectIndex validates, encodes and signs an index with the hub key.
func SignObjectIndex(ix ObjectIndex, key ed25519.PrivateKey) ([]byte, error) {
	ix.Schema = Schema
	if ix.Entries == nil {
		ix.Entries = []ObjectEntry{}
	}
	if err := ValidDeviceID(ix.Device); err != nil {
		return nil, err
	}
	if err := ix.validate(); err != nil {
		return nil, fmt.Errorf("object index: %w", err)
	}
	return signDoc(contextObjectIndex, ix, key)
}

// OpenObjectIndex checks an index's signature with the hub key, that it is
// for this device, and its entries.
func OpenObjectIndex(data []byte, device string, hub ed25519.PublicKey) (*ObjectIndex, error) {
	var ix ObjectIndex
	if err := openDoc("object index", contextObjectIndex, data, MaxDesiredBytes, hub, &ix, func() int { return ix.Schema }); err != nil {
		return nil, err
	}
	if ix.Device != device {
		return nil, fmt.Errorf("object index is for device %s, this is %q", quote(ix.Device), device)
	}
	if err := ix.validate(); err != nil {
		return nil, fmt.Errorf("object index: %w", err)
	}
	return &ix, nil
}

// ObjectGet is a device's request for index entries it lacks.
type ObjectGet struct {
	Schema int           `json:"schema"`
	Refs   []ObjectEntry `json:"refs"`
}

// EncodeObjectGet encodes a request.
func EncodeObjectGet(refs []ObjectEntry) ([]byte, error) {
	g := ObjectGet{Schema: Schema, Refs: refs}
	if err := g.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

func (g *ObjectGet) validate() error {
	if len(g.Refs) == 0 || len(g.Refs) > MaxObjectGetRefs {
		return fmt.Errorf("object request: %d refs, want 1 to %d", len(g.Refs), MaxObjectGetRefs)
	}
	for i, r := range g.Refs {
		if err := r.validate(); err != nil {
			return fmt.Errorf("object request: refs[%d]: %w", i, err)
		}
	}
	return nil
}

// DecodeObjectGet decodes a device's request strictly.
func DecodeObjectGet(data []byte) (*ObjectGet, error) {
	var g ObjectGet
	if err := decodeStrict("object request", data, maxObjectGetBytes, &g, func() int { return g.Schema }); err != nil {
		return nil, err
	}
	if err := g.validate(); err != nil {
		return nil, err
	}
	return &g, nil
}

// ObjectHeader is what the hub signs of an object message: which object,
// for which device, and the hash of the sealed data that follows it.
type ObjectHeader struct {
	Schema int         `json:"schema"`
	Device string      `json:"device"`
	Entry  ObjectEntry `json:"entry"`
	// Type is a Secret's type.
	Type string `json:"type,omitempty"`
	// SealedSHA256 is the hex SHA-256 of the sealed bytes.
	SealedSHA256 string `json:"sealedSha256"`
}

// SealInfo is the HPKE info an object's data is sealed with: it binds the
// ciphertext to one device and one version of one object, so sealed data
// replayed under another header does not open.
func SealInfo(device string, e ObjectEntry) []byte {
	return []byte("podvisor object data v1\n" + device + "\n" + e.Kind + "\n" + e.Namespace + "\n" +
		e.Name + "\n" + e.UID + "\n" + e.ResourceVersion)
}

// EncodeObject makes an object message: the signed header on one line,
// then the sealed data as raw bytes (no base64: a 1 MiB object stays
// under the broker's packet limit).
func EncodeObject(h ObjectHeader, sealed []byte, key ed25519.PrivateKey) ([]byte, error) {
	h.Schema = Schema
	if err := ValidDeviceID(h.Device); err != nil {
		return nil, err
	}
	if err := h.Entry.validate(); err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	sum := sha256.Sum256(sealed)
	h.SealedSHA256 = hex.EncodeToString(sum[:])
	head, err := signDoc(contextObject, h, key)
	if err != nil {
		return nil, err
	}
	if n := len(head) + 1 + len(sealed); n > MaxObjectMessageBytes {
		return nil, fmt.Errorf("object %s: a message of %d bytes, over the %d byte limit", h.Entry.Key(), n, MaxObjectMessageBytes)
	}
	return append(append(head, '\n'), sealed...), nil
}

// OpenObject checks an object message: size, the hub's signature, that it
// is for this device, and the sealed bytes' hash. It returns the header
// and the sealed data, which only the device's key opens (SealInfo).
func OpenObject(data []byte, device string, hub ed25519.PublicKey) (*ObjectHeader, []byte, error) {
	if len(data) > MaxObjectMessageBytes {
		return nil, nil, fmt.Errorf("object: %d bytes, over the %d byte limit", len(data), MaxObjectMessageBytes)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, nil, errors.New("object: no header line")
	}
	var h ObjectHeader
	if err := openDoc("object", contextObject, data[:nl], MaxMessageBytes, hub, &h, func() int { return h.Schema }); err != nil {
		return nil, nil, err
	}
	if h.Device != device {
		return nil, nil, fmt.Errorf("object is for device %s, this is %q", quote(h.Device), device)
	}
	if err := h.Entry.validate(); err != nil {
		return nil, nil, fmt.Errorf("object: %w", err)
	}
	sealed := data[nl+1:]
	sum := sha256.Sum256(sealed)
	if hex.EncodeToString(sum[:]) != h.SealedSHA256 {
		return nil, nil, fmt.Errorf("object %s: the sealed data does not match the signed hash", h.Entry.Key())
	}
	return &h, sealed, nil
}

// EncodeData is an object's data as it is sealed: the keys, sorted, each
// with its value, length-prefixed (uvarint). Binary, so that sealing adds
// no base64 to a 1 MiB object.
func EncodeData(data map[string][]byte) []byte {
	keys := make([]string, 0, len(data))
	n := 0
	for k, v := range data {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	sort.Strings(keys)
	out := make([]byte, 0, n)
	for _, k := range keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.AppendUvarint(out, uint64(len(data[k])))
		out = append(out, data[k]...)
	}
	return out
}

// DecodeData reverses EncodeData, refusing anything malformed: a length
// past the end, an empty or repeated key, keys out of order.
func DecodeData(b []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	last := ""
	for len(b) > 0 {
		k, rest, err := field(b)
		if err != nil {
			return nil, err
		}
		v, rest, err := field(rest)
		if err != nil {
			return nil, err
		}
		key := string(k)
		if key == "" || (len(out) > 0 && key <= last) {
			return nil, errors.New("object data: keys empty, repeated or out of order")
		}
		out[key] = bytes.Clone(v)
		last, b = key, rest
	}
	return out, nil
}

func field(b []byte) (val, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, errors.New("object data: a length past the end")
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}

// SealKey is a device's public sealing key, as it announces it.
type SealKey struct {
	Schema int    `json:"schema"`
	Device string `json:"device"`
	// Suite names the construction (seal.Suite's short name).
	Suite     string `json:"suite"`
	PublicKey []byte `json:"publicKey"`
}

// SealSuite is the one suite spoken: HPKE MLKEM768-X25519, HKDF-SHA256,
// ChaCha20-Poly1305.
const SealSuite = "hpke-mlkem768x25519-hkdfsha256-chacha20poly1305"

// EncodeSealKey encodes a device's announcement.
func EncodeSealKey(device string, pub []byte) ([]byte, error) {
	if err := ValidDeviceID(device); err != nil {
		return nil, err
	}
	return json.Marshal(SealKey{Schema: Schema, Device: device, Suite: SealSuite, PublicKey: pub})
}

// DecodeSealKey decodes an announcement strictly; the caller checks the
// key itself (seal.ParsePublicKey) and that the device is the sender.
func DecodeSealKey(data []byte) (*SealKey, error) {
	var k SealKey
	if err := decodeStrict("seal key", data, maxSealKeyBytes, &k, func() int { return k.Schema }); err != nil {
		return nil, err
	}
	if k.Suite != SealSuite {
		return nil, fmt.Errorf("seal key: suite %s, this hub speaks %s", quote(k.Suite), SealSuite)
	}
	if err := ValidDeviceID(k.Device); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &k, nil
}
