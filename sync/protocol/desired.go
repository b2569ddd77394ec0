package protocol

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Desired is what the hub wants one device to run: every hub pod of the
// device, whole, at a generation that only grows. A device applies the
// newest generation it has seen and ignores older ones.
type Desired struct {
	Schema     int    `json:"schema"`
	Device     string `json:"device"`
	Generation int64  `json:"generation"`
	// Pods are v1.Pod documents, decoded one by one so that a bad pod is
	// refused alone, with its reason.
	Pods []json.RawMessage `json:"pods"`
	// Fence, when set, says the operator declared the device dead
	// (podhub fence device): the pods it names must not run here, and
	// the device stops them before it starts any pod of the document.
	Fence *Fence `json:"fence,omitempty"`
}

// Fence names the hub pods a fenced device must not run. The hub has
// deleted them and may run them elsewhere; the device, once it reads the
// fence, stops them (gracefully, then forced) before anything else, and
// the fence stays in every later document until the operator lifts it.
type Fence struct {
	// Since is when the operator fenced the device, on the hub's clock;
	// it is shown, never compared with the device's clock.
	Since time.Time `json:"since"`
	// Pods are namespace/name keys.
	Pods []string `json:"pods"`
}

// MaxFencedPods bounds a fence's list (a device runs far fewer pods).
const MaxFencedPods = 4096

// validate checks a fence's keys: namespace/name, bounded.
func (f *Fence) validate() error {
	if len(f.Pods) > MaxFencedPods {
		return fmt.Errorf("fence: %d pods, over the limit of %d", len(f.Pods), MaxFencedPods)
	}
	for i, k := range f.Pods {
		ns, name, ok := strings.Cut(k, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") || len(k) > 317 {
			return fmt.Errorf("fence: pods[%d] %q: want namespace/name", i, k)
		}
	}
	return nil
}

// Signed is the envelope a desired document travels in: the signature is
// the hub's ed25519 signature of Desired's bytes exactly as they appear,
// so no canonical form is needed. A broker, which can publish anything,
// cannot make a device run a pod the hub did not sign.
type Signed struct {
	Schema    int             `json:"schema"`
	Desired   json.RawMessage `json:"desired"`
	KeyID     string          `json:"keyId,omitempty"`
	Signature []byte          `json:"signature,omitempty"`
}

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Sign encodes and signs a desired document; a nil key leaves it unsigned.
func Sign(d Desired, key ed25519.PrivateKey) ([]byte, error) {
	d.Schema = Schema
	if d.Pods == nil {
		d.Pods = []json.RawMessage{}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	env := Signed{Schema: Schema, Desired: raw}
	if key != nil {
		env.KeyID = KeyID(key.Public().(ed25519.PublicKey))
		env.Signature = ed25519.Sign(key, raw)
	}
	return json.Marshal(env)
}

// ErrUnsigned is a desired document without a signature, refused unless
// the device allows unsigned documents.
var ErrUnsigned = errors.New("desired document is not signed, and this device accepts only signed ones")

// OpenDesired checks and decodes a desired document for a device: size,
// envelope, signature (with hub; nil hub accepts only when allowUnsigned),
// schema, the device it names and its generation. Its pods are decoded
// separately, by DecodePods.
func OpenDesired(data []byte, device string, hub ed25519.PublicKey, allowUnsigned bool) (*Desired, error) {
	var env Signed
	if err := decodeStrict("desired document", data, MaxDesiredBytes, &env, func() int { return env.Schema }); err != nil {
		return nil, err
	}
	switch {
	case len(env.Signature) == 0 && !allowUnsigned:
		return nil, ErrUnsigned
	case len(env.Signature) > 0 && hub != nil:
		if !ed25519.Verify(hub, env.Desired, env.Signature) {
			return nil, fmt.Errorf("desired document: the signature (key %s) does not verify with the hub's key %s", env.KeyID, KeyID(hub))
		}
	case len(env.Signature) > 0 && !allowUnsigned:
		return nil, errors.New("desired document: signed, but this device has no hub key to check it with")
	}
	var d Desired
	if len(env.Desired) == 0 {
		return nil, errors.New("desired document: no desired field")
	}
	if err := decodeStrict("desired document", env.Desired, MaxDesiredBytes, &d, func() int { return d.Schema }); err != nil {
		return nil, err
	}
	if d.Device != device {
		return nil, fmt.Errorf("desired document is for device %q, this is %q", d.Device, device)
	}
	if d.Generation < 1 {
		return nil, fmt.Errorf("desired document: generation %d, must be 1 or more", d.Generation)
	}
	if d.Fence != nil {
		if err := d.Fence.validate(); err != nil {
			return nil, fmt.Errorf("desired document: %w", err)
		}
	}
	return &d, nil
}

// PodResult is a device's verdict on one pod of a desired document.
type PodResult struct {
	Index     int    `json:"index"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Accepted  bool   `json:"accepted"`
	Reason    string `json:"reason,omitempty"`
}

// PodDecoder decodes, defaults and validates the pods of one manifest:
// manifest.Decode, on the device and at the hub alike. The wire format
// carries pods; what makes a pod valid is the daemon's to say.
type PodDecoder func(data []byte) ([]*v1.Pod, error)

// DecodePods decodes each pod of a document with decode, as a manifest
// file's pod is, and returns the accepted pods with a result for every
// pod. A pod whose name repeats an earlier one's is refused.
func DecodePods(d *Desired, decode PodDecoder) ([]*v1.Pod, []PodResult) {
	var pods []*v1.Pod
	results := make([]PodResult, len(d.Pods))
	seen := map[string]bool{}
	for i, raw := range d.Pods {
		r := &results[i]
		r.Index = i
		decoded, err := decode(raw)
		if err == nil && len(decoded) != 1 {
			err = fmt.Errorf("want one pod, found %d", len(decoded))
		}
		if err != nil {
			r.Namespace, r.Name = peekName(raw)
			r.Reason = fmt.Sprintf("pods[%d]: %v", i, err)
			continue
		}
		p := decoded[0]
		r.Namespace, r.Name = p.Namespace, p.Name
		if key := p.Namespace + "/" + p.Name; seen[key] {
			r.Reason = fmt.Sprintf("pods[%d]: pod %s appears twice in the document", i, key)
			continue
		} else {
			seen[key] = true
		}
		r.Accepted = true
		pods = append(pods, p)
	}
	return pods, results
}

// peekName reads what it can of an invalid pod's name, for its result.
func peekName(raw []byte) (namespace, name string) {
	var meta struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &meta) == nil {
		namespace, name = meta.Metadata.Namespace, meta.Metadata.Name
		if name != "" && namespace == "" {
			namespace = "default"
		}
	}
	return namespace, name
}
