// Package registrytest runs Debian's docker-registry (the distribution
// registry) for tests that pull: on a private port and data directory,
// with htpasswd logins (bcrypt) when asked, plain on loopback or over TLS
// under a throwaway CA. A missing registry or htpasswd skips the test, or
// fails it under CI=true (test/prereq). It imports no podvisor package
// but the test support ones, so that in-package tests can use it.
package registrytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
)

// Start runs a registry on loopback over plain HTTP and returns its
// host:port. With a user, it wants that login (htpasswd); without one,
// it wants none.
func Start(t testing.TB, user, password string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	run(t, t.TempDir(), addr, "", user, password)
	return addr
}

// StartTLS runs a registry that wants the login user and password, over
// TLS under a test CA, reached by a name that is not localhost (see
// listener). It returns host:port and the CA's certificate file.
func StartTLS(t testing.TB, user, password string) (addr, caFile string) {
	t.Helper()
	host, ip, l := listener(t)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	caFile, certFile, keyFile := testCA(t, dir, host, ip)
	run(t, dir, net.JoinHostPort(ip.String(), fmt.Sprint(port)), fmt.Sprintf(", tls: {certificate: %s, key: %s}", certFile, keyFile), user, password)
	return net.JoinHostPort(host, fmt.Sprint(port)), caFile
}

// run starts the registry listening on listen, its http section's extra
// settings (YAML flow, after addr) given, and waits until it listens.
func run(t testing.TB, dir, listen, httpExtra, user, password string) {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		prereq.Missing(t, "docker-registry (Debian's docker-registry): %v", err)
	}
	auth := ""
	if user != "" {
		htpasswd, err := exec.LookPath("htpasswd")
		if err != nil {
			prereq.Missing(t, "htpasswd (Debian's apache2-utils): %v", err)
		}
		users := filepath.Join(dir, "htpasswd")
		if out, err := exec.Command(htpasswd, "-Bbc", users, user, password).CombinedOutput(); err != nil {
			t.Fatalf("htpasswd: %v %s", err, out)
		}
		auth = fmt.Sprintf("auth: {htpasswd: {realm: podvisor-test, path: %s}}\n", users)
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %q%s}\n%s",
		filepath.Join(dir, "data"), listen, httpExtra, auth)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", config)
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logFile.Close()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("the test registry did not listen on %s within 10 s:\n%s", listen, log)
		}
	}
}

// PushWithCtr stores the image archive (an OCI tar naming name) in the
// registry as ref with containerd's ctr, through containerd at address in
// a namespace of the test's own; login is user:password, caFile the
// registry's CA ("": plain HTTP).
func PushWithCtr(t testing.TB, address, archive, name, ref, login, caFile string) {
	t.Helper()
	push := []string{"images", "push", "--plain-http"}
	if caFile != "" {
		push = []string{"images", "push", "--tlscacert", caFile}
	}
	if login != "" {
		push = append(push, "-u", login)
	}
	for _, args := range [][]string{
		{"images", "import", archive},
		{"images", "tag", "--force", name, ref},
		append(push, ref),
	} {
		cmd := exec.Command("ctr", append([]string{"-a", address, "-n", "push"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// testCA is a throwaway CA and a server certificate it signed for a
// registry's host name and address, written as PEM files into dir.
func testCA(t testing.TB, dir, host string, ip net.IP) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podvisor test registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), DNSNames: []string{host}, IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.crt", "CERTIFICATE", caDER), write("registry.crt", "CERTIFICATE", der), write("registry.key", "EC PRIVATE KEY", keyDER)
}

// listener finds a name for the registry that is not localhost
// (containerd's resolver speaks plain HTTP to localhost and loopback
// addresses): the machine's host name where it resolves to an address
// the test can listen on, else the machine's first other address. The
// listener holds a free port.
func listener(t testing.TB) (string, net.IP, net.Listener) {
	t.Helper()
	if host, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(host); err == nil && len(ips) > 0 {
			if l, err := net.Listen("tcp", net.JoinHostPort(ips[0].String(), "0")); err == nil {
				return host, ips[0], l
			}
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			if l, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0")); err == nil {
				return n.IP.String(), n.IP, l
			}
		}
	}
	prereq.Missing(t, "a name for this machine that is not localhost: a host name that resolves, or a non-loopback address")
	return "", nil, nil
}
