package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
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

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// pki is a test CA that issues the broker's and the clients' certificates.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	next int64
}

func newPKI(t *testing.T) *pki {
	p := &pki{dir: t.TempDir(), next: 2}
	p.key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podvisor test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	writePEM(t, p.path("ca.pem"), "CERTIFICATE", der)
	return p
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes <name>.pem and <name>.key for a certificate with the
// common name cn (a device's ID, or "podhub"); a server gets 127.0.0.1.
func (p *pki) issue(t *testing.T, name, cn string, server bool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.next), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	p.next++
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.path(name+".pem"), "CERTIFICATE", der)
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	writePEM(t, p.path(name+".key"), "PRIVATE KEY", kder)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startMosquitto runs Debian's Mosquitto 2 on a private port with TLS,
// client certificates (the certificate's CN is the MQTT user name) and
// the example ACL from packaging/, which confines each device to its
// own topics; and on a second port, plain, with user names and passwords
// (users maps them) under the same ACL.
func startMosquitto(t *testing.T, p *pki, users map[string]string) (tlsAddr, passwordAddr string) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/mosquitto"); err != nil {
			prerequisite(t, "mosquitto (Debian's mosquitto): not installed")
		}
		bin = "/usr/sbin/mosquitto"
	}
	p.issue(t, "broker", "localhost", true)
	addr := freeLoopback(t)
	_, port, _ := net.SplitHostPort(addr)
	passwordAddr = freeLoopback(t)
	_, pwPort, _ := net.SplitHostPort(passwordAddr)
	passwd := p.path("passwd")
	os.WriteFile(passwd, nil, 0o600)
	for u, pw := range users {
		if out, err := exec.Command("mosquitto_passwd", "-b", passwd, u, pw).CombinedOutput(); err != nil {
			prerequisite(t, "mosquitto_passwd: %v %s", err, out)
		}
	}
	acl, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "mosquitto", "acl"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.path("acl"), acl, 0o644)
	// user root: the test's files are private to root, and Mosquitto would
	// otherwise drop to its own user before reading them.
	conf := fmt.Sprintf(`user root
per_listener_settings true
listener %s 127.0.0.1
cafile %s
certfile %s
keyfile %s
require_certificate true
use_identity_as_username true
set_tcp_nodelay true
acl_file %s

listener %s 127.0.0.1
allow_anonymous false
password_file %s
set_tcp_nodelay true
acl_file %s
`, port, p.path("ca.pem"), p.path("broker.pem"), p.path("broker.key"), p.path("acl"), pwPort, passwd, p.path("acl"))
	os.WriteFile(p.path("mosquitto.conf"), []byte(conf), 0o644)
	cmd := exec.Command(bin, "-c", p.path("mosquitto.conf"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("mosquitto log:\n%s", log.String())
		}
	})
	for _, a := range []string{addr, passwordAddr} {
		waitForLong(t, 10*time.Second, "mosquitto listening on "+a, func() bool {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	return addr, passwordAddr
}

func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// mqttsClient connects to the broker with the certificate issued as name.
func mqttsClient(t *testing.T, p *pki, addr, name, id string) (mqtt.Client, error) {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	cert, err := tls.LoadX509KeyPair(p.path(name+".pem"), p.path(name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtts://" + addr).SetClientID(id).
		SetTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}))
	tok := c.Connect()
	tok.Wait()
	return c, tok.Error()
}

// A fleet on a real Mosquitto 2 with TLS, client certificates and the
// packaged ACL: the hub and the device work as on the embedded broker; a
// device with a user name and password works too, and a wrong password
// is refused; a client without a certificate is refused; a device cannot
// publish on another device's topics.
func TestMosquittoTLSAndACL(t *testing.T) {
	p := newPKI(t)
	addr, pwAddr := startMosquitto(t, p, map[string]string{"gw-pw": "s3cret-pw"})
	p.issue(t, "podhub", "podhub", false)
	p.issue(t, "gw-tls", "gw-tls", false)
	p.issue(t, "gw-evil", "gw-evil", false)

	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub"), addr: addr}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("broker: mqtts://%s\ntls: {ca: %s, cert: %s, key: %s}\n",
		addr, p.path("ca.pem"), p.path("podhub.pem"), p.path("podhub.key"))), 0o644)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.log = &bytes.Buffer{}
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	waitForLong(t, 10*time.Second, "podhub serving", func() bool { _, code := h.cli("get", "devices"); return code == 0 })
	h.cli("label", "device", "gw-tls", "tls=yes") // enrolled: the hub believes only devices it knows

	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtts://%s, deviceId: gw-tls, key: %s, tls: {ca: %s, cert: %s, key: %s}}\n",
		addr, filepath.Join(h.dataDir, "hub.pub"), p.path("ca.pem"), p.path("gw-tls.pem"), p.path("gw-tls.key")))
	d.start()
	waitForLong(t, 20*time.Second, "gw-tls Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Contains(out, "gw-tls") && !strings.Contains(out, "NotReady")
	})
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("app", "Always", 1, "exec sleep 1004")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-tls"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("app", 20*time.Second, running)
	waitForLong(t, 20*time.Second, "app mirrored", func() bool { p, ok := h.pods(t, "gw-tls")["app"]; return ok && running(&p) })

	// A device with a user name and password, on the password listener.
	pwFile := filepath.Join(t.TempDir(), "password")
	os.WriteFile(pwFile, []byte("s3cret-pw\n"), 0o600)
	d2 := newDaemon(t)
	d2.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: gw-pw, key: %s, username: gw-pw, passwordFile: %s}\n",
		pwAddr, filepath.Join(h.dataDir, "hub.pub"), pwFile))
	d2.start()
	os.WriteFile(manifest, []byte(processPod("pwapp", "Always", 1, "exec sleep 1005")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-pw"); code != 0 {
		t.Fatalf("apply to gw-pw: %s", out)
	}
	d2.waitPod("pwapp", 20*time.Second, running)
	waitForLong(t, 20*time.Second, "pwapp mirrored", func() bool { p, ok := h.pods(t, "gw-pw")["pwapp"]; return ok && running(&p) })
	// A wrong password is refused by the broker.
	bad := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + pwAddr).SetClientID("podvisor-gw-pw2").
		SetUsername("gw-pw").SetPassword("wrong"))
	if tok := bad.Connect(); tok.Wait() && tok.Error() == nil {
		bad.Disconnect(0)
		t.Fatal("a wrong password connected")
	}

	// No certificate, no connection.
	plain := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtts://" + addr).SetClientID("anon").
		SetTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if tok := plain.Connect(); tok.Wait() && tok.Error() == nil {
		plain.Disconnect(0)
		t.Fatal("a client without a certificate connected")
	}
	// Another device cannot speak for gw-tls: its status and desired
	// messages on gw-tls's topics are dropped by the broker.
	evil, err := mqttsClient(t, p, addr, "gw-evil", "podvisor-gw-evil")
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Disconnect(0)
	fake := protocol.Encode(&protocol.StatusBatch{Device: "gw-tls", Epoch: "forged", Items: []protocol.StatusItem{{Seq: 1, Key: "default/app"}}})
	evil.Publish(protocol.Topics{}.Device("gw-tls", protocol.KindStatus), 1, false, fake).Wait()
	unsigned, _ := protocol.Sign(protocol.Desired{Device: "gw-tls", Generation: 50, Pods: []json.RawMessage{}}, nil)
	evil.Publish(protocol.Topics{}.Device("gw-tls", protocol.KindDesired), 1, true, unsigned).Wait()
	time.Sleep(time.Second)
	if _, ok := h.pods(t, "gw-tls")["app"]; !ok {
		t.Fatal("a forged status from another device removed gw-tls's pod at the hub")
	}
	d.waitPod("app", 5*time.Second, running)
	out, _ := h.cli("describe", "device", "gw-tls")
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "Observed: generation 1") || strings.Contains(out, "not signed") {
		t.Fatalf("the forged desired document reached gw-tls:\n%s", out)
	}
}
