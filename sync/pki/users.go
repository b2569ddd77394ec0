package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// UsersOrganization is the organization (O) of a user's certificate:
// the hub's HTTPS listener admits a client certificate only with it, so
// a device's certificate (which has none) reads nothing of the fleet.
const UsersOrganization = "podhub:users"

// Files of the hub's HTTPS listener's server certificate.
const (
	HTTPCert = "http.crt"
	HTTPKey  = "http.key"
	usersDir = "users" // users/<name>/<serial>.pem, to revoke by name
	// renewBefore is how long before its end a server certificate is
	// issued again.
	renewBefore = 30 * 24 * time.Hour
)

// ValidUserName checks a user's name (a certificate's common name and a
// token's name): 1 to 63 characters, lower-case letters, digits and
// - . _ @ inside, letters or digits at both ends.
func ValidUserName(name string) error {
	if len(name) == 0 || len(name) > 63 {
		return fmt.Errorf("user name %q: must be 1 to 63 characters", name)
	}
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(name)-1 || !strings.ContainsRune("-._@", r)) {
			return fmt.Errorf("user name %q: only lower-case letters, digits and - . _ @ inside, letters or digits at both ends", name)
		}
	}
	return nil
}

// IsUser reports whether cert is a user's: it names UsersOrganization.
func IsUser(cert *x509.Certificate) bool {
	return slices.Contains(cert.Subject.Organization, UsersOrganization)
}

// IssueUser issues a user of the hub's HTTPS listener a client
// certificate: CN=name, O=podhub:users. Users and devices share the CRL,
// and a name is a user's or a device's, never both (the broker knows a
// client by its common name). A user holding a certificate not revoked
// is refused one more.
func (ca *CA) IssueUser(name string) (Issued, error) {
	if err := ValidUserName(name); err != nil {
		return Issued{}, err
	}
	if Reserved(name) {
		return Issued{}, fmt.Errorf("user name %q: reserved for the hub and its broker", name)
	}
	if devices, err := ca.issuedSerials(name); err != nil {
		return Issued{}, err
	} else if len(devices) > 0 {
		return Issued{}, fmt.Errorf("user name %q: a device has that name; choose another", name)
	}
	revoked, err := ca.Revoked()
	if err != nil {
		return Issued{}, err
	}
	serials, err := ca.serialsIn(filepath.Join(usersDir, name))
	if err != nil {
		return Issued{}, err
	}
	for _, s := range serials {
		if !revoked.Has(s) {
			return Issued{}, fmt.Errorf("user %q: already has a certificate (serial %x); revoke it first (podhub user revoke %s)", name, s, name)
		}
	}
	cert, key, serial, err := ca.issue(name, false, nil, []string{UsersOrganization})
	if err != nil {
		return Issued{}, err
	}
	dir := filepath.Join(ca.dir, usersDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Issued{}, err
	}
	if err := writeFile(filepath.Join(dir, serial.Text(16)+".pem"), cert, 0o644); err != nil {
		return Issued{}, err
	}
	return Issued{Cert: cert, Key: key, Serial: serial}, nil
}

// RevokeUser revokes every certificate issued to the user and rewrites
// the CRL. It returns the serials newly revoked (none: all were already).
func (ca *CA) RevokeUser(name string) ([]*big.Int, error) {
	if err := ValidUserName(name); err != nil {
		return nil, err
	}
	serials, err := ca.serialsIn(filepath.Join(usersDir, name))
	if err != nil {
		return nil, err
	}
	if len(serials) == 0 {
		return nil, fmt.Errorf("user %q: no certificate was issued to it here", name)
	}
	return ca.revokeSerials(serials)
}

// EnsureServer makes sure certPath and keyPath hold a server certificate
// of this CA for every one of names (host names or IP addresses) that is
// not within 30 days of its end; otherwise it issues one. It reports
// whether it issued.
func (ca *CA) EnsureServer(certPath, keyPath, cn string, names []string) (bool, error) {
	if pair, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err == nil && ca.covers(leaf, names) {
			return false, nil
		}
	}
	if err := ca.writePair(certPath, keyPath, cn, true, names); err != nil {
		return false, err
	}
	return true, nil
}

// covers reports whether leaf is this CA's, valid for a while yet, and
// names every one of names.
func (ca *CA) covers(leaf *x509.Certificate, names []string) bool {
	if leaf.CheckSignatureFrom(ca.cert) != nil || ca.now().Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}
