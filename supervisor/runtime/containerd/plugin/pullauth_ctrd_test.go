package plugin

import (
	"context"
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

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/prereq"
)

// testCA is a throwaway CA and a server certificate it signed for a
// registry's host name and address, written as PEM files into dir.
func testCA(t *testing.T, dir, host string, ip net.IP) (caFile, certFile, keyFile string) {
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

// startTLSRegistry runs Debian's distribution registry with htpasswd
// authentication (bcrypt) and TLS under a test CA, on a private port and
// data directory, reached by a name that is not localhost
// (registryListener). It returns host:port and the CA's file.
func startTLSRegistry(t *testing.T, user, password string) (string, string) {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		prereq.Missing(t, "docker-registry (Debian's docker-registry): %v", err)
	}
	htpasswd, err := exec.LookPath("htpasswd")
	if err != nil {
		prereq.Missing(t, "htpasswd (Debian's apache2-utils): %v", err)
	}
	host, ip, l := registryListener(t)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	caFile, certFile, keyFile := testCA(t, dir, host, ip)
	users := filepath.Join(dir, "htpasswd")
	if out, err := exec.Command(htpasswd, "-Bbc", users, user, password).CombinedOutput(); err != nil {
		t.Fatalf("htpasswd: %v %s", err, out)
	}
	listen := net.JoinHostPort(ip.String(), fmt.Sprint(port))
	config := filepath.Join(dir, "config.yml")
	os.WriteFile(config, []byte(fmt.Sprintf(`version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: %s}}
http: {addr: %q, tls: {certificate: %s, key: %s}}
auth: {htpasswd: {realm: podvisor-test, path: %s}}
`, filepath.Join(dir, "data"), listen, certFile, keyFile, users)), 0o644)
	cmd := exec.Command(bin, "serve", config)
	logFile, _ := os.Create(filepath.Join(dir, "registry.log"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, "the test registry to listen on "+listen, func() bool {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return net.JoinHostPort(host, fmt.Sprint(port)), caFile
}

// registryListener finds a name for the registry that is not localhost
// (the resolver speaks plain HTTP to a loopback address): the machine's
// host name where it resolves to an address the test can listen on, else
// the machine's first other address. The listener holds a free port.
func registryListener(t *testing.T) (string, net.IP, net.Listener) {
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

// pushAuthenticated stores a test image in the registry under ref, with
// containerd's own client in a namespace of the test's own.
func pushAuthenticated(t *testing.T, p *Plugin, ref, user, password string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: ref, Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := namespaces.WithNamespace(context.Background(), "pv-push")
	imgs, err := p.client.Import(ctx, f)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("importing the image to push: %v (%d images)", err, len(imgs))
	}
	resolver := p.resolver(func(string) (string, string, error) { return user, password, nil })
	if err := p.client.Push(ctx, ref, imgs[0].Target, ctrd.WithResolver(resolver)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// runPull pulls image (policy Always) with auth and runs a container of
// it to its end; it returns the plugin's failure (nil: it ran).
func runPull(t *testing.T, p *Plugin, id, image string, auth pluginapi.PullAuth) *pluginapi.Failure {
	t.Helper()
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id}, Image: image, PullPolicy: "Always",
		Command: []string{"true"}, LogPath: filepath.Join(t.TempDir(), "0.log")}
	var reply pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg, Pull: auth}, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Failure == nil {
		var st pluginapi.ExitStatus
		p.Wait(pluginapi.IDArgs{ID: id}, &st)
		if err := p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	return reply.Failure
}

// Pulls from a registry that wants a login, over TLS under a CA of its
// own: the login of the pod's pull secrets is given for that pull only;
// without it, or with a wrong password, the registry's 401 comes back as
// the kubelet's ErrImagePull with containerd's CRI message and no
// password in it; the logins are tried in order; and without the CA in
// the certificates directory the registry is not trusted.
func TestPullWithPullSecretLogins(t *testing.T) {
	const user, password = "fleet", "s3cret-Pa55"
	p, _ := newPlugin(t)
	registry, caFile := startTLSRegistry(t, user, password)
	certs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(certs, registry), 0o755); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(caFile)
	os.WriteFile(filepath.Join(certs, registry, "ca.crt"), ca, 0o644)
	p.cfg.CertsDir = certs

	ref := registry + "/pv/app:1"
	pushAuthenticated(t, p, ref, user, password)
	login := func(pass string) pluginapi.Credential { return pluginapi.Credential{Username: user, Password: pass} }
	unauthorized := func(what string, f *pluginapi.Failure) {
		t.Helper()
		if f == nil || f.Reason != pluginapi.ErrImagePull {
			t.Fatalf("%s: %+v, want ErrImagePull", what, f)
		}
		if !strings.HasPrefix(f.Message, fmt.Sprintf("failed to pull and unpack image %q: ", ref)) || !strings.Contains(f.Message, "401 Unauthorized") {
			t.Fatalf("%s: message %q, want containerd's with the registry's 401 Unauthorized", what, f.Message)
		}
		t.Logf("%s: %s: %s", what, f.Reason, f.Message)
		if strings.Contains(f.Message, password) || strings.Contains(f.Message, "wrong-one") {
			t.Fatalf("%s: a password in the message: %q", what, f.Message)
		}
	}

	unauthorized("without a login", runPull(t, p, "anonymous", ref, pluginapi.PullAuth{}))
	unauthorized("with a wrong password", runPull(t, p, "wrong", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one")}}))
	if f := runPull(t, p, "login", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login(password)}}); f != nil {
		t.Fatalf("with the pull secret's login: %+v", f)
	}
	if origin, _ := record(t, p, ref); origin != originPull {
		t.Fatalf("the pulled image's origin %q, want %q", origin, originPull)
	}
	if f := runPull(t, p, "second", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one"), login(password)}}); f != nil {
		t.Fatalf("a wrong login, then the right one: %+v", f)
	}
	f := runPull(t, p, "both-wrong", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one"), {Username: "other", Password: "wrong-one"}}})
	unauthorized("with two wrong logins", f)
	if f := runPull(t, p, "secret-error", ref, pluginapi.PullAuth{Error: `image pull secret "bad": .dockerconfigjson: invalid JSON at offset 10`}); f == nil ||
		f.Reason != pluginapi.ErrImagePull || !strings.Contains(f.Message, `secret "bad"`) {
		t.Fatalf("a malformed pull secret: %+v, want ErrImagePull naming it", f)
	}

	p.cfg.CertsDir = t.TempDir() // the CA is not trusted here
	f = runPull(t, p, "untrusted", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login(password)}})
	if f == nil || f.Reason != pluginapi.ErrImagePull || !strings.Contains(f.Message, "certificate") {
		t.Fatalf("a registry of an untrusted CA: %+v, want a certificate error", f)
	}
}
