package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitIssueRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	created, err := Init(dir, []string{"hub.example.com", "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != 7 {
		t.Fatalf("created %v", created)
	}
	for name, mode := range map[string]os.FileMode{caKeyFile: 0o600, BrokerKey: 0o600, HubKey: 0o600, CAFile: 0o644, CRLFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %#o", name, err, fi.Mode(), mode)
		}
	}
	if again, err := Init(dir, nil); err != nil || len(again) != 0 {
		t.Fatalf("a second Init: %v %v, want nothing made", again, err)
	}
	ca, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	broker, err := tls.LoadX509KeyPair(filepath.Join(dir, BrokerCert), filepath.Join(dir, BrokerKey))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(broker.Certificate[0])
	for _, host := range []string{"hub.example.com", "10.0.0.5", "127.0.0.1", "localhost"} {
		if err := leaf.VerifyHostname(host); err != nil {
			t.Errorf("the broker certificate for %s: %v", host, err)
		}
	}

	for id, want := range map[string]string{"Bad_ID": "device ID", "podhub": "reserved", "inline": "reserved", "": "device ID"} {
		if _, err := ca.IssueDevice(id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("issuing %q: %v, want %q", id, err, want)
		}
	}
	first, err := ca.IssueDevice("gw-1")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(first.Cert)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if cert.Subject.CommonName != "gw-1" {
		t.Fatalf("CN %q", cert.Subject.CommonName)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the device certificate does not verify as a client: %v", err)
	}
	if _, err := ca.IssueDevice("gw-1"); err == nil || !strings.Contains(err.Error(), "revoke it first") {
		t.Fatalf("a second certificate for gw-1: %v", err)
	}
	serials, err := ca.Revoke("gw-1")
	if err != nil || len(serials) != 1 || serials[0].Cmp(first.Serial) != 0 {
		t.Fatalf("revoke: %v %v", serials, err)
	}
	if again, err := ca.Revoke("gw-1"); err != nil || len(again) != 0 {
		t.Fatalf("revoking again: %v %v", again, err)
	}
	if _, err := ca.Revoke("gw-never"); err == nil {
		t.Fatal("revoking a device never enrolled")
	}
	second, err := ca.IssueDevice("gw-1")
	if err != nil {
		t.Fatalf("enrolling again after the revocation: %v", err)
	}
	set, err := LoadRevoked(dir, ca.Certificate())
	if err != nil || !set.Has(first.Serial) || set.Has(second.Serial) {
		t.Fatalf("revoked set %v %v", set, err)
	}
	// A CRL signed by another CA is refused, not ignored.
	other := filepath.Join(t.TempDir(), "other")
	Init(other, nil)
	data, _ := os.ReadFile(filepath.Join(other, CRLFile))
	os.WriteFile(filepath.Join(dir, CRLFile), data, 0o644)
	if _, err := LoadRevoked(dir, ca.Certificate()); err == nil || !strings.Contains(err.Error(), "not signed by the CA") {
		t.Fatalf("a foreign CRL: %v", err)
	}
}
