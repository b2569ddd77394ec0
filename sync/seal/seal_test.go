package seal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpensOnlyForItsKeyAndInfo(t *testing.T) {
	dev, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("broker password: s3cr3t-marker")
	ct, err := Seal(dev.Public(), []byte("device-a object 1"), msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ct) != len(msg)+Overhead {
		t.Errorf("ciphertext of %d bytes for %d, want +%d", len(ct), len(msg), Overhead)
	}
	if bytes.Contains(ct, []byte("s3cr3t")) {
		t.Fatal("the plaintext shows in the ciphertext")
	}
	got, err := dev.Open([]byte("device-a object 1"), ct)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	if _, err := other.Open([]byte("device-a object 1"), ct); !errors.Is(err, ErrOpen) {
		t.Errorf("another device's key opened it: %v", err)
	}
	if _, err := dev.Open([]byte("device-a object 2"), ct); !errors.Is(err, ErrOpen) {
		t.Errorf("another info opened it: %v", err)
	}
	for _, i := range []int{0, 1119, 1120, len(ct) - 1} {
		bad := bytes.Clone(ct)
		bad[i] ^= 1
		if _, err := dev.Open([]byte("device-a object 1"), bad); !errors.Is(err, ErrOpen) {
			t.Errorf("byte %d flipped: opened (%v)", i, err)
		}
	}
	if _, err := dev.Open(nil, ct[:10]); !errors.Is(err, ErrOpen) {
		t.Errorf("short ciphertext: %v", err)
	}
}

func TestPublicKeyEncoding(t *testing.T) {
	k, _ := GenerateKey()
	b := k.Public().Bytes()
	if len(b) != PublicKeySize {
		t.Fatalf("public key of %d bytes, want %d", len(b), PublicKeySize)
	}
	p, err := ParsePublicKey(b)
	if err != nil || !p.Equal(k.Public()) {
		t.Fatalf("parse: %v", err)
	}
	if _, err := ParsePublicKey(b[:32]); err == nil {
		t.Error("a short key parsed")
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "seal.key")
	k, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	k2, created, err := LoadOrCreate(path)
	if err != nil || created || !k2.Public().Equal(k.Public()) {
		t.Fatalf("load: %v %v", created, err)
	}
	ct, _ := Seal(k.Public(), nil, []byte("x"))
	if got, err := k2.Open(nil, ct); err != nil || string(got) != "x" {
		t.Fatalf("the loaded key does not open: %v", err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadPrivateKey(path); err == nil {
		t.Error("a key readable by others loaded")
	}
	os.WriteFile(filepath.Join(dir, "other"), []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600)
	if _, err := LoadPrivateKey(filepath.Join(dir, "other")); err == nil {
		t.Error("a file of another kind loaded")
	}
	if err := WriteKeyFile(path, []byte("x")); err == nil {
		t.Error("an existing key was replaced")
	}
}
