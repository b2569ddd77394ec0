// Package pki is podhub's certificate authority for the MQTT broker: it
// makes the CA that the broker trusts, issues the broker's, the hub's and
// each device's certificates, and keeps the revocation list (a CRL, which
// Mosquitto reads too). A certificate's common name is the client's
// identity at the broker: HubIdentity for the hub, the device ID for a
// device.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// HubIdentity is the hub's common name and MQTT client ID. No device may
// have it: the broker's ACL gives it the whole topic tree.
const HubIdentity = "podhub"

// Reserved reports whether id may not be a device's identity: the hub's,
// and "inline", the embedded broker's own client (mochi's inline client).
func Reserved(id string) bool { return id == HubIdentity || id == "inline" }

// Files in a PKI directory (<data-dir>/pki). Keys are 0600.
const (
	CAFile        = "ca.pem"
	caKeyFile     = "ca.key"
	BrokerCert    = "broker.pem"
	BrokerKey     = "broker.key"
	HubCert       = "podhub.pem"
	HubKey        = "podhub.key"
	CRLFile       = "crl.pem"
	issuedDir     = "issued" // issued/<identity>/<serial>.pem, to revoke by identity
	caLifetime    = 20 * 365 * 24 * time.Hour
	certLifetime  = 10 * 365 * 24 * time.Hour
	clockSkewSlop = time.Hour
)

// CA is a loaded certificate authority.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
	now  func() time.Time
}

// Init creates in dir whatever is missing of the CA, the broker's server
// certificate (for brokerNames, plus localhost and the loopback
// addresses), the hub's client certificate and an empty revocation list;
// it never replaces an existing file. It returns the files it created.
func Init(dir string, brokerNames []string) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, issuedDir), 0o700); err != nil {
		return nil, err
	}
	var created []string
	if !exists(filepath.Join(dir, CAFile)) {
		if err := newCA(dir); err != nil {
			return nil, err
		}
		created = append(created, filepath.Join(dir, CAFile), filepath.Join(dir, caKeyFile))
	}
	ca, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if !exists(filepath.Join(dir, BrokerCert)) {
		names := append([]string{"localhost", "127.0.0.1", "::1"}, brokerNames...)
		if err := ca.writePair(filepath.Join(dir, BrokerCert), filepath.Join(dir, BrokerKey), "podhub broker", true, names); err != nil {
			return nil, err
		}
		created = append(created, filepath.Join(dir, BrokerCert), filepath.Join(dir, BrokerKey))
	}
	if !exists(filepath.Join(dir, HubCert)) {
		if err := ca.writePair(filepath.Join(dir, HubCert), filepath.Join(dir, HubKey), HubIdentity, false, nil); err != nil {
			return nil, err
		}
		created = append(created, filepath.Join(dir, HubCert), filepath.Join(dir, HubKey))
	}
	if !exists(filepath.Join(dir, CRLFile)) {
		if err := ca.writeCRL(nil); err != nil {
			return nil, err
		}
		created = append(created, filepath.Join(dir, CRLFile))
	}
	return created, nil
}

func newCA(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: "podhub CA"},
		NotBefore: now.Add(-clockSkewSlop), NotAfter: now.Add(caLifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	// The key first: a CA certificate without its key is useless.
	if err := writeKey(filepath.Join(dir, caKeyFile), key); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CAFile), pemBlock("CERTIFICATE", der), 0o644)
}

// Load reads the CA in dir.
func Load(dir string) (*CA, error) {
	cert, err := readCert(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("CA (run podhub init): %w", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("CA key %s: no PEM block", filepath.Join(dir, caKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", filepath.Join(dir, caKeyFile), err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s: not a signing key", filepath.Join(dir, caKeyFile))
	}
	return &CA{dir: dir, cert: cert, key: signer, now: time.Now}, nil
}

// Certificate is the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Issued is one device's new credentials, PEM encoded.
type Issued struct {
	Cert, Key []byte
	Serial    *big.Int
}

// IssueDevice issues a client certificate whose common name is the device
// ID. A device that already holds a certificate not revoked is refused:
// one identity, one holder (revoke the old one first).
func (ca *CA) IssueDevice(id string) (Issued, error) {
	if err := protocol.ValidDeviceID(id); err != nil {
		return Issued{}, err
	}
	if Reserved(id) {
		return Issued{}, fmt.Errorf("device ID %q: reserved for the hub and its broker", id)
	}
	revoked, err := ca.Revoked()
	if err != nil {
		return Issued{}, err
	}
	serials, err := ca.issuedSerials(id)
	if err != nil {
		return Issued{}, err
	}
	for _, s := range serials {
		if !revoked.Has(s) {
			return Issued{}, fmt.Errorf("device ID %q: already has a certificate (serial %x); revoke it first (podhub device revoke %s)", id, s, id)
		}
	}
	if users, err := ca.serialsIn(filepath.Join(usersDir, id)); err != nil {
		return Issued{}, err
	} else if len(users) > 0 {
		return Issued{}, fmt.Errorf("device ID %q: a user of the hub's HTTPS listener has that name; choose another", id)
	}
	cert, key, serial, err := ca.issue(id, false, nil, nil)
	if err != nil {
		return Issued{}, err
	}
	if err := os.MkdirAll(filepath.Join(ca.dir, issuedDir, id), 0o700); err != nil {
		return Issued{}, err
	}
	if err := writeFile(filepath.Join(ca.dir, issuedDir, id, serial.Text(16)+".pem"), cert, 0o644); err != nil {
		return Issued{}, err
	}
	return Issued{Cert: cert, Key: key, Serial: serial}, nil
}

// Revoke revokes every certificate issued to identity and rewrites the
// CRL. It returns the serials newly revoked (none: nothing to revoke).
func (ca *CA) Revoke(identity string) ([]*big.Int, error) {
	if err := protocol.ValidDeviceID(identity); err != nil {
		return nil, err
	}
	serials, err := ca.issuedSerials(identity)
	if err != nil {
		return nil, err
	}
	if len(serials) == 0 {
		return nil, fmt.Errorf("device ID %q: no certificate was issued to it here", identity)
	}
	return ca.revokeSerials(serials)
}

// revokeSerials adds serials to the CRL and rewrites it; it returns the
// ones not revoked before.
func (ca *CA) revokeSerials(serials []*big.Int) ([]*big.Int, error) {
	list, err := readCRL(filepath.Join(ca.dir, CRLFile), ca.cert)
	if err != nil {
		return nil, err
	}
	entries := list.RevokedCertificateEntries
	have := RevokedSet{}
	for _, e := range entries {
		have[e.SerialNumber.String()] = true
	}
	var added []*big.Int
	for _, s := range serials {
		if !have.Has(s) {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: ca.now()})
			added = append(added, s)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	return added, ca.writeCRL(entries)
}

// Revoked is the set of revoked serials in the CA's CRL.
func (ca *CA) Revoked() (RevokedSet, error) { return LoadRevoked(ca.dir, ca.cert) }

func (ca *CA) issuedSerials(identity string) ([]*big.Int, error) {
	return ca.serialsIn(filepath.Join(issuedDir, identity))
}

// serialsIn reads the serials of the certificates in sub, a folder of the
// CA's directory.
func (ca *CA) serialsIn(sub string) ([]*big.Int, error) {
	entries, err := os.ReadDir(filepath.Join(ca.dir, sub))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*big.Int
	for _, e := range entries {
		c, err := readCert(filepath.Join(ca.dir, sub, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, c.SerialNumber)
	}
	return out, nil
}

// writeCRL signs and writes the revocation list; it is valid as long as
// the CA, since OpenSSL (Mosquitto) refuses every client once a CRL's
// next update has passed.
func (ca *CA) writeCRL(entries []x509.RevocationListEntry) error {
	number := big.NewInt(ca.now().UnixNano())
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: number, ThisUpdate: ca.now().Add(-clockSkewSlop), NextUpdate: ca.cert.NotAfter,
		RevokedCertificateEntries: entries}, ca.cert, ca.key)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(ca.dir, CRLFile), pemBlock("X509 CRL", der), 0o644)
}

// writePair issues a certificate and writes it and its key.
func (ca *CA) writePair(certPath, keyPath, cn string, server bool, names []string) error {
	cert, key, _, err := ca.issue(cn, server, names, nil)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, key, 0o600); err != nil {
		return err
	}
	return writeFile(certPath, cert, 0o644)
}

// issue makes a key pair and a certificate for cn (in the organizations
// orgs): a client certificate, or a server one for names (host names or
// IP addresses).
func (ca *CA) issue(cn string, server bool, names, orgs []string) (certPEM, keyPEM []byte, serial *big.Int, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := ca.now()
	serial = randomSerial()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-clockSkewSlop), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if !slices.Contains(tmpl.DNSNames, n) {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), serial, nil
}

// RevokedSet holds revoked serial numbers (decimal strings).
type RevokedSet map[string]bool

// Has reports whether serial is revoked.
func (r RevokedSet) Has(serial *big.Int) bool { return r[serial.String()] }

// LoadRevoked reads the CRL in dir and checks that ca signed it. A
// missing CRL is an empty set.
func LoadRevoked(dir string, ca *x509.Certificate) (RevokedSet, error) {
	path := filepath.Join(dir, CRLFile)
	if !exists(path) {
		return RevokedSet{}, nil
	}
	list, err := readCRL(path, ca)
	if err != nil {
		return nil, err
	}
	set := RevokedSet{}
	for _, e := range list.RevokedCertificateEntries {
		set[e.SerialNumber.String()] = true
	}
	return set, nil
}

func readCRL(path string, ca *x509.Certificate) (*x509.RevocationList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("revocation list: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "X509 CRL" {
		return nil, fmt.Errorf("revocation list %s: no X509 CRL PEM block", path)
	}
	list, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("revocation list %s: %w", path, err)
	}
	if err := list.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("revocation list %s: not signed by the CA: %w", path, err)
	}
	return list, nil
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no CERTIFICATE PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pemBlock("PRIVATE KEY", der), 0o600)
}

// writeFile writes through a temporary file and a rename, created with
// its final mode (never briefly readable by others).
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func randomSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Pool is a certificate pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}
