package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
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

// startMosquitto runs Debian's Mosquitto 2 on a private port with TLS,
// client certificates from podhub's CA (pki, from podhub init) and its
// revocation list, each certificate's CN as the user name and client
// ID, and the ACL from packaging/, which confines each device to its own
// topics; and on a second port, plain, with user names and passwords
// (users maps them) under the same ACL.
func startMosquitto(t *testing.T, pki string, users map[string]string) (tlsAddr, passwordAddr string) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/mosquitto"); err != nil {
			prerequisite(t, "mosquitto (Debian's mosquitto): not installed")
		}
		bin = "/usr/sbin/mosquitto"
	}
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	addr := freeLoopback(t)
	_, port, _ := net.SplitHostPort(addr)
	passwordAddr = freeLoopback(t)
	_, pwPort, _ := net.SplitHostPort(passwordAddr)
	passwd := path("passwd")
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
	os.WriteFile(path("acl"), acl, 0o644)
	// The listener settings of packaging/mosquitto/podvisor.conf, on
	// private ports. user root: the test's files are private to root,
	// and Mosquitto would otherwise drop to its own user before reading
	// them.
	conf := fmt.Sprintf(`user root
per_listener_settings true
listener %s 127.0.0.1
cafile %s
certfile %s
keyfile %s
crlfile %s
require_certificate true
use_identity_as_username true
use_username_as_clientid true
allow_anonymous false
set_tcp_nodelay true
acl_file %s

listener %s 127.0.0.1
allow_anonymous false
password_file %s
use_username_as_clientid true
set_tcp_nodelay true
acl_file %s
`, port, filepath.Join(pki, "ca.pem"), filepath.Join(pki, "broker.pem"), filepath.Join(pki, "broker.key"), filepath.Join(pki, "crl.pem"),
		path("acl"), pwPort, passwd, path("acl"))
	os.WriteFile(path("mosquitto.conf"), []byte(conf), 0o644)
	cmd := exec.Command(bin, "-c", path("mosquitto.conf"))
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

// A fleet on a real Mosquitto 2 with TLS, client certificates issued by
// podhub init and podhub device add, and the packaged ACL: the hub and
// the device work as on the embedded broker; a device with a user name
// and password works too, and a wrong password is refused; a client
// without a certificate, or with a revoked one, is refused; a device
// cannot publish on another device's topics nor take its client ID.
func TestMosquittoTLSAndACL(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	pki := filepath.Join(h.dataDir, "pki")
	addr, pwAddr := startMosquittoAfter(t, h, pki)
	h.addr = addr
	_, tlsConfig := h.enrol(t, "gw-tls")
	evilDir, _ := h.enrol(t, "gw-evil")

	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("broker: mqtts://%s\ntls: {ca: %s}\n",
		addr, filepath.Join(pki, "ca.pem"))), 0o600)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.startCmd()
	t.Cleanup(h.stop)

	d := newDaemon(t)
	d.withConfig(tlsConfig + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-tls Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-tls") == "Ready"
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
	d2.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: gw-pw, key: %s, username: gw-pw, passwordFile: %s, allowProcessPods: true, allowRootProcessPods: true}\n",
		pwAddr, filepath.Join(h.dataDir, "hub.pub"), pwFile))
	d2.start()
	os.WriteFile(manifest, []byte(processPod("pwapp", "Always", 1, "exec sleep 1005")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-pw"); code != 0 {
		t.Fatalf("apply to gw-pw: %s", out)
	}
	d2.waitPod("pwapp", 20*time.Second, running)
	waitForLong(t, 20*time.Second, "pwapp mirrored", func() bool { p, ok := h.pods(t, "gw-pw")["pwapp"]; return ok && running(&p) })
	// A wrong password is refused by the broker.
	bad := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + pwAddr).SetClientID("gw-pw2").
		SetUsername("gw-pw").SetPassword("wrong"))
	if tok := bad.Connect(); tok.Wait() && tok.Error() == nil {
		bad.Disconnect(0)
		t.Fatal("a wrong password connected")
	}

	// No certificate, no connection; a revoked one neither.
	plain := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtts://" + addr).SetClientID("anon").
		SetTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if tok := plain.Connect(); tok.Wait() && tok.Error() == nil {
		plain.Disconnect(0)
		t.Fatal("a client without a certificate connected")
	}
	if _, _, err := dial(t, "mqtts://"+addr, bundle(h.revokedDir).tls(t), "gw-revoked"); err == nil {
		t.Fatal("a revoked certificate connected to Mosquitto")
	}
	// gw-evil asking for gw-tls's client ID gets its own: gw-tls stays.
	evil, _, err := dial(t, "mqtts://"+addr, bundle(evilDir).tls(t), "gw-tls")
	if err != nil {
		t.Fatal(err)
	}
	// Another device cannot speak for gw-tls: its status and desired
	// messages on gw-tls's topics are dropped by the broker.
	fake := protocol.Encode(&protocol.StatusBatch{Device: "gw-tls", Epoch: "forged", Items: []protocol.StatusItem{{Seq: 1, Key: "default/app"}}})
	evil.Publish(protocol.Topics{}.Device("gw-tls", protocol.KindStatus), 1, false, fake).WaitTimeout(5 * time.Second)
	unsigned, _ := protocol.Sign(protocol.Desired{Device: "gw-tls", Generation: 50, Pods: []json.RawMessage{}}, nil)
	evil.Publish(protocol.Topics{}.Device("gw-tls", protocol.KindDesired), 1, true, unsigned).WaitTimeout(5 * time.Second)
	time.Sleep(time.Second)
	if _, ok := h.pods(t, "gw-tls")["app"]; !ok {
		t.Fatal("a forged status from another device removed gw-tls's pod at the hub")
	}
	d.waitPod("app", 5*time.Second, running)
	out, _ := h.cli("describe", "device", "gw-tls")
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "Observed: generation 1") || strings.Contains(out, "not signed") {
		t.Fatalf("the forged desired document reached gw-tls:\n%s", out)
	}
	if strings.Contains(d.log.String(), "hub connection lost") {
		t.Fatalf("gw-tls lost its connection when gw-evil asked for its client ID:\n%s", d.log)
	}
}

// startMosquittoAfter enrols and revokes gw-revoked (so the CRL Mosquitto
// loads lists it), then starts Mosquitto with the password user gw-pw.
func startMosquittoAfter(t *testing.T, h *podhubServer, pki string) (string, string) {
	h.revokedDir, _ = h.enrol(t, "gw-revoked")
	if out, code := h.cli("device", "revoke", "gw-revoked"); code != 0 {
		t.Fatalf("revoke: %s", out)
	}
	return startMosquitto(t, pki, map[string]string{"gw-pw": "s3cret-pw"})
}
