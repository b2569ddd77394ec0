package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestUsersAndDevicesApart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	ca, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"Alice": "user name", "podhub": "reserved", "-a": "user name", "": "user name", strings.Repeat("a", 64): "1 to 63"} {
		if _, err := ca.IssueUser(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("user %q: %v, want %q", name, err, want)
		}
	}
	alice, err := ca.IssueUser("alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(alice.Cert)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "alice@example.com" || !IsUser(cert) || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("user certificate %v %v", cert.Subject, cert.ExtKeyUsage)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the user's certificate does not verify as a client's: %v", err)
	}
	dev, err := ca.IssueDevice("gw-1")
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(dev.Cert)
	if devCert, _ := x509.ParseCertificate(block.Bytes); IsUser(devCert) {
		t.Error("a device's certificate counts as a user's")
	}
	if _, err := ca.IssueUser("gw-1"); err == nil || !strings.Contains(err.Error(), "a device has that name") {
		t.Errorf("a user named as a device: %v", err)
	}
	if _, err := ca.IssueUser("bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueDevice("bob"); err == nil || !strings.Contains(err.Error(), "user") {
		t.Errorf("a device named as a user: %v", err)
	}
	if _, err := ca.IssueUser("alice@example.com"); err == nil || !strings.Contains(err.Error(), "revoke it first") {
		t.Errorf("a second certificate: %v", err)
	}
	if _, err := ca.Revoke("bob"); err == nil {
		t.Error("device revoke took a user")
	}
	revoked, err := ca.RevokeUser("alice@example.com")
	if err != nil || len(revoked) != 1 || revoked[0].Cmp(alice.Serial) != 0 {
		t.Fatalf("RevokeUser: %v %v", revoked, err)
	}
	if set, _ := ca.Revoked(); !set.Has(alice.Serial) || set.Has(dev.Serial) {
		t.Errorf("CRL %v", set)
	}
	if again, err := ca.RevokeUser("alice@example.com"); err != nil || len(again) != 0 {
		t.Errorf("revoking again: %v %v", again, err)
	}
	if _, err := ca.RevokeUser("carol"); err == nil {
		t.Error("revoked a user never issued")
	}
	if _, err := ca.IssueUser("alice@example.com"); err != nil {
		t.Errorf("a new certificate after revocation: %v", err)
	}
}

func TestEnsureServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	ca, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, HTTPCert), filepath.Join(dir, HTTPKey)
	serial := func() string {
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		return leaf.SerialNumber.String()
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	if issued, err := ca.EnsureServer(certPath, keyPath, "podhub https", names); err != nil || !issued {
		t.Fatalf("first: %v %v", issued, err)
	}
	first := serial()
	if issued, err := ca.EnsureServer(certPath, keyPath, "podhub https", names[:1]); err != nil || issued || serial() != first {
		t.Errorf("names it has: issued %v %v", issued, err)
	}
	if issued, err := ca.EnsureServer(certPath, keyPath, "podhub https", append(names, "hub.example.com")); err != nil || !issued || serial() == first {
		t.Errorf("a new name: issued %v %v", issued, err)
	}
	second := serial()
	ca.now = func() time.Time { return time.Now().Add(certLifetime - 29*24*time.Hour) }
	if issued, err := ca.EnsureServer(certPath, keyPath, "podhub https", names); err != nil || !issued || serial() == second {
		t.Errorf("within 30 days of its end: issued %v %v", issued, err)
	}
}
