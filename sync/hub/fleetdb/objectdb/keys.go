package objectdb

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// KeySize is the bytes of a secrets key: AES-256.
const KeySize = 32

// Key is a key Secrets are sealed with at rest, and the file it came
// from (for errors).
type Key struct {
	// ID names the key beside each ciphertext: the first 8 bytes of the
	// SHA-256 of the key, in hex, so a row says which key opens it and a
	// later rotation can keep older keys to open older rows.
	ID   string
	File string
	aead cipher.AEAD
}

// NewKey is the key of KeySize raw bytes; file names it in errors.
func NewKey(raw []byte, file string) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets key file %s: %d bytes, want %d (a raw AES-256 key, as head -c 32 /dev/urandom makes)", file, len(raw), KeySize)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	return &Key{ID: hex.EncodeToString(sum[:8]), File: file, aead: aead}, nil
}

// ReadKeyFile reads a secrets key file, which only its owner may read.
func ReadKeyFile(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s: mode %#o lets other users read it; chmod 600 %s", path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, KeySize+1))
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return NewKey(raw, path)
}

// CreateKeyFile makes a new random key in a new file of mode 0600; it
// never replaces a file (a key that seals Secrets is never overwritten).
func CreateKeyFile(path string) (*Key, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	err = f.Chmod(0o600) // whatever the umask
	if err == nil {
		_, err = f.Write(raw)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return NewKey(raw, path)
}

// Keyring seals with its primary key and opens with any of its keys.
type Keyring struct {
	primary *Key
	byID    map[string]*Key
}

// NewKeyring seals with primary; older keys only open what they sealed.
func NewKeyring(primary *Key, older ...*Key) *Keyring {
	k := &Keyring{primary: primary, byID: map[string]*Key{primary.ID: primary}}
	for _, o := range older {
		k.byID[o.ID] = o
	}
	return k
}

// ErrNoKey is a Secret to seal or open without a secrets key.
var ErrNoKey = errors.New("the hub has no secrets key (podhub serve loads it: secretsKeyFile in podhub.yaml, default <data-dir>/secrets.key)")

// seal encrypts plain bound to aad: nonce || ciphertext, and the key's ID.
func (k *Keyring) seal(plain, aad []byte) (string, []byte, error) {
	if k == nil {
		return "", nil, ErrNoKey
	}
	a := k.primary.aead
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, err
	}
	return k.primary.ID, a.Seal(nonce, nonce, plain, aad), nil
}

// open decrypts what seal made under the key id, bound to aad.
func (k *Keyring) open(id string, sealed, aad []byte) ([]byte, error) {
	if k == nil {
		return nil, ErrNoKey
	}
	key, ok := k.byID[id]
	if !ok {
		return nil, fmt.Errorf("sealed under secrets key %s, but the key file %s holds key %s: is it the key file this hub's Secrets were stored with?",
			id, k.primary.File, k.primary.ID)
	}
	n := key.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed data too short")
	}
	plain, err := key.aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, fmt.Errorf("cannot be opened with secrets key %s (%s): the stored row was changed", id, key.File)
	}
	return plain, nil
}

// has says whether the ring holds the key id.
func (k *Keyring) has(id string) bool {
	if k == nil {
		return false
	}
	_, ok := k.byID[id]
	return ok
}
