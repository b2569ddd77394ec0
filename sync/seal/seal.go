// Package seal encrypts data for one device: Hybrid Public Key Encryption
// (RFC 9180) from Go's standard library (crypto/hpke), single-shot, base
// mode. The suite is fixed, so nothing on the wire can choose a weaker one:
//
//   - KEM: ML-KEM-768 with X25519 (MLKEM768-X25519), the hybrid Go's TLS
//     uses by default. A device keeps its secrets for years and a broker may
//     record every message: a post-quantum KEM keeps today's recordings
//     closed, X25519 keeps the classical guarantee should ML-KEM fall.
//   - KDF: HKDF-SHA256.
//   - AEAD: ChaCha20-Poly1305, fast in software on the ARM cores of small
//     devices that lack AES instructions.
//
// Base mode does not say who sealed: whoever knows a device's public key
// can seal for it. Messages that carry sealed data are therefore also
// signed by the hub (sync/protocol).
package seal

import (
	"crypto/hpke"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Suite names the construction, for documents and logs.
const Suite = "HPKE base mode: MLKEM768-X25519, HKDF-SHA256, ChaCha20-Poly1305"

func kem() hpke.KEM   { return hpke.MLKEM768X25519() }
func kdf() hpke.KDF   { return hpke.HKDFSHA256() }
func aead() hpke.AEAD { return hpke.ChaCha20Poly1305() }

// PublicKeySize is the size of an encoded public key.
const PublicKeySize = 1216

// Overhead is what sealing adds to a plaintext: the encapsulated key and
// the AEAD tag.
const Overhead = 1120 + 16

// PrivateKey is a device's key for opening what was sealed for it.
type PrivateKey struct{ k hpke.PrivateKey }

// PublicKey is what the hub seals for.
type PublicKey struct{ k hpke.PublicKey }

// GenerateKey makes a new key pair.
func GenerateKey() (*PrivateKey, error) {
	k, err := kem().GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("seal: generating a key: %w", err)
	}
	return &PrivateKey{k}, nil
}

// Public is the key's public half.
func (p *PrivateKey) Public() *PublicKey { return &PublicKey{p.k.PublicKey()} }

// Bytes is the public key's encoding (RFC 9180 SerializePublicKey).
func (p *PublicKey) Bytes() []byte { return p.k.Bytes() }

// Equal tells whether two public keys are the same.
func (p *PublicKey) Equal(q *PublicKey) bool {
	return q != nil && string(p.Bytes()) == string(q.Bytes())
}

// ParsePublicKey decodes a public key's bytes.
func ParsePublicKey(b []byte) (*PublicKey, error) {
	if len(b) != PublicKeySize {
		return nil, fmt.Errorf("seal: public key of %d bytes, want %d (%s)", len(b), PublicKeySize, Suite)
	}
	k, err := kem().NewPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("seal: public key: %w", err)
	}
	return &PublicKey{k}, nil
}

// Seal encrypts plaintext for the holder of pub. info binds the ciphertext
// to its context (which device, which object, which version): opened with
// another info, it fails.
func Seal(pub *PublicKey, info, plaintext []byte) ([]byte, error) {
	if pub == nil {
		return nil, errors.New("seal: no public key")
	}
	return hpke.Seal(pub.k, kdf(), aead(), info, plaintext)
}

// ErrOpen is a ciphertext that does not open: sealed for another key or
// another info, or changed on the way.
var ErrOpen = errors.New("seal: the data does not open with this device's key (sealed for another device or context, or tampered with)")

// Open decrypts what Seal sealed for this key with the same info.
func (p *PrivateKey) Open(info, ciphertext []byte) ([]byte, error) {
	if len(ciphertext) < Overhead {
		return nil, ErrOpen
	}
	out, err := hpke.Open(p.k, kdf(), aead(), info, ciphertext)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

// Key files hold a private key as one line of base64 of its RFC 9180
// encoding after a header naming the suite, so a file of another kind
// is refused by name.
const fileHeader = "podvisor seal key v1 mlkem768x25519\n"

// MarshalPrivateKey encodes a private key for a key file.
func MarshalPrivateKey(p *PrivateKey) ([]byte, error) {
	b, err := p.k.Bytes()
	if err != nil {
		return nil, err
	}
	return []byte(fileHeader + base64.StdEncoding.EncodeToString(b) + "\n"), nil
}

// ParsePrivateKey decodes a key file's contents.
func ParsePrivateKey(data []byte) (*PrivateKey, error) {
	s := string(data)
	if !strings.HasPrefix(s, fileHeader) {
		return nil, errors.New("not a podvisor seal key (want the first line " + strings.TrimSpace(fileHeader) + ")")
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s[len(fileHeader):]))
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	k, err := kem().NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &PrivateKey{k}, nil
}

// LoadPrivateKey reads a key file, refusing one that others may read.
func LoadPrivateKey(path string) (*PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("seal key %s: mode %04o, readable by others; want 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreate reads the key file at path, or makes a new key there (0600,
// written to a temporary file, synced and renamed) when there is none.
// created says which.
func LoadOrCreate(path string) (k *PrivateKey, created bool, err error) {
	k, err = LoadPrivateKey(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	if k, err = GenerateKey(); err != nil {
		return nil, false, err
	}
	data, err := MarshalPrivateKey(k)
	if err != nil {
		return nil, false, err
	}
	if err := WriteKeyFile(path, data); err != nil {
		return nil, false, err
	}
	return k, true, nil
}

// WriteKeyFile writes a key file atomically, 0600, refusing to replace one.
func WriteKeyFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	// A link, not a rename: an existing key is never replaced.
	if err := os.Link(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("seal key %s: %w", path, err)
	}
	return os.Remove(tmp)
}
