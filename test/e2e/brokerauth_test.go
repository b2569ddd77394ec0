package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// credentials are a client's certificate, key and the CA, as files.
type credentials struct{ ca, cert, key string }

// bundle is the credentials podhub device add wrote into dir.
func bundle(dir string) credentials {
	return credentials{filepath.Join(dir, "ca.pem"), filepath.Join(dir, "device.pem"), filepath.Join(dir, "device.key")}
}

// hubCredentials is the hub's own certificate from podhub init.
func (h *podhubServer) hubCredentials() credentials {
	p := filepath.Join(h.dataDir, "pki")
	return credentials{filepath.Join(p, "ca.pem"), filepath.Join(p, "podhub.pem"), filepath.Join(p, "podhub.key")}
}

func (c credentials) tls(t *testing.T) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool}
	if c.cert != "" {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// dial connects a raw MQTT client; lost is closed when the broker drops it.
func dial(t *testing.T, url string, tc *tls.Config, id string) (mqtt.Client, <-chan struct{}, error) {
	t.Helper()
	lost := make(chan struct{})
	var once sync.Once
	opts := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second).SetConnectRetry(false).SetWriteTimeout(time.Second).
		SetConnectionLostHandler(func(mqtt.Client, error) { once.Do(func() { close(lost) }) })
	if tc != nil {
		opts.SetTLSConfig(tc)
	}
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, nil, fmt.Errorf("connect to %s: timed out", url)
	}
	if tok.Error() != nil {
		return nil, nil, tok.Error()
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, lost, nil
}

// observer is the hub's identity reading the whole topic tree, to see
// what the broker lets through.
type observer struct {
	mu       sync.Mutex
	seen     map[string]int
	payloads map[string]bool // topic + NUL + payload
}

func newObserver(t *testing.T, h *podhubServer) *observer {
	o := &observer{seen: map[string]int{}, payloads: map[string]bool{}}
	c, _, err := dial(t, "mqtts://"+h.addr, h.hubCredentials().tls(t), "podhub")
	if err != nil {
		t.Fatalf("the hub's identity connecting: %v", err)
	}
	if tok := c.Subscribe("podvisor/v1/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		o.mu.Lock()
		o.seen[m.Topic()]++
		o.payloads[m.Topic()+"\x00"+string(m.Payload())] = true
		o.mu.Unlock()
	}); tok.Wait() && tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	return o
}

// saw reports whether this payload was delivered on topic.
func (o *observer) saw(topic string, payload []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.payloads[topic+"\x00"+string(payload)]
}

func (o *observer) count(topic string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[topic]
}

// Nobody connects without a certificate from the hub's CA: not over
// plain MQTT, not over TLS without a certificate, not with a certificate
// from another CA; and the broker may listen off loopback because it
// always requires them.
func TestBrokerRefusesAnonymous(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	_, port, _ := net.SplitHostPort(freeLoopback(t))
	h.addr = net.JoinHostPort("127.0.0.1", port)
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve", "--mqtt-listen", "0.0.0.0:"+port)
	h.startCmd()
	t.Cleanup(h.stop)

	addrs := []string{h.addr}
	if ip := nonLoopbackIP(); ip != "" {
		addrs = append(addrs, net.JoinHostPort(ip, port)) // as a remote client reaches it
	}
	for _, a := range addrs {
		if _, _, err := dial(t, "mqtt://"+a, nil, "anon"); err == nil {
			t.Fatalf("an anonymous plain MQTT client connected to %s", a)
		}
		noCert := credentials{ca: h.hubCredentials().ca}
		tc := noCert.tls(t)
		tc.InsecureSkipVerify = true // the address may not be in the broker's certificate
		if _, _, err := dial(t, "mqtts://"+a, tc, "anon"); err == nil {
			t.Fatalf("a TLS client without a certificate connected to %s", a)
		}
	}
	// A certificate from another hub's CA, with a valid device ID.
	other := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "other"), addr: h.addr}
	other.cli("init")
	dir, _ := other.enrol(t, "gw-other")
	foreign := bundle(dir)
	foreign.ca = h.hubCredentials().ca
	if _, _, err := dial(t, "mqtts://"+h.addr, foreign.tls(t), "gw-other"); err == nil {
		t.Fatal("a certificate from another CA connected")
	}
	// A genuine device connects, on every address (so the refusals above
	// were the broker's).
	dir, _ = h.enrol(t, "gw-ok")
	for _, a := range addrs {
		tc := bundle(dir).tls(t)
		tc.ServerName = "localhost" // in the broker's certificate
		c, _, err := dial(t, "mqtts://"+a, tc, "gw-ok")
		if err != nil {
			t.Fatalf("an enrolled device on %s: %v", a, err)
		}
		c.Disconnect(100)
	}
}

// A device's certificate cannot speak for another device nor read its
// desired document: forged status, ack, heartbeat, presence and desired
// messages on gw-b's topics reach no subscriber, a retained junk message
// is refused, and a subscription to gw-b's desired delivers nothing.
func TestBrokerDeviceACL(t *testing.T) {
	h := newPodhub(t)
	dirA, _ := h.enrol(t, "gw-a")
	_, cfgB := h.enrol(t, "gw-b")
	obs := newObserver(t, h)

	// gw-b is a real device with a hub pod, so its desired document is
	// retained on the broker.
	d := newDaemon(t)
	d.withConfig(cfgB + hostCommandsAsRoot)
	d.start()
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("app", "Always", 1, "exec sleep 1011")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-b"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("app", 20*time.Second, running)
	waitForLong(t, 20*time.Second, "gw-b's app mirrored Running at the hub", func() bool {
		p, ok := h.pods(t, "gw-b")["app"]
		return ok && running(&p)
	})

	a, _, err := dial(t, "mqtts://"+h.addr, bundle(dirA).tls(t), "gw-a")
	if err != nil {
		t.Fatal(err)
	}
	var stolen atomic.Int32
	tok := a.Subscribe(protocol.Topics{}.Device("gw-b", protocol.KindDesired), 1, func(mqtt.Client, mqtt.Message) { stolen.Add(1) })
	tok.Wait()
	if st, ok := tok.(*mqtt.SubscribeToken); !ok || st.Result()[protocol.Topics{}.Device("gw-b", protocol.KindDesired)] != 0x80 {
		t.Fatalf("subscribing to another device's desired topic: %v, want refused (0x80)", tok.(*mqtt.SubscribeToken).Result())
	}
	a.Subscribe("podvisor/v1/#", 0, func(mqtt.Client, mqtt.Message) { stolen.Add(1) }).Wait()

	forged := map[string][]byte{
		protocol.KindStatus:    protocol.Encode(&protocol.StatusBatch{Device: "gw-b", Epoch: "forged", Items: []protocol.StatusItem{{Seq: 1 << 40, Key: "default/app"}}}),
		protocol.KindAck:       protocol.Encode(&protocol.Ack{Device: "gw-b", ObservedGeneration: 99}),
		protocol.KindHeartbeat: []byte(`{"schema":1,"device":"gw-b"}`),
		protocol.KindPresence:  protocol.Encode(&protocol.Presence{Device: "gw-b", Online: false}),
		protocol.KindDesired:   []byte(`{"forged":true}`),
	}
	for kind, payload := range forged {
		// QoS 0: the broker drops it silently (QoS 1 would disconnect).
		a.Publish(protocol.Topics{}.Device("gw-b", kind), 0, false, payload).Wait()
	}
	// Its own status topic, retained: refused with a disconnect.
	a.Publish(protocol.Topics{}.Device("gw-a", protocol.KindStatus), 0, true, []byte("junk")).Wait()
	// A marker it may send, to know the broker has handled the above.
	a2, _, err := dial(t, "mqtts://"+h.addr, bundle(dirA).tls(t), "gw-a")
	if err != nil {
		t.Fatal(err)
	}
	a2.Publish(protocol.Topics{}.Device("gw-a", protocol.KindHeartbeat), 1, false, []byte(`{}`)).Wait()
	waitForLong(t, 10*time.Second, "the observer sees gw-a's own heartbeat", func() bool {
		return obs.count(protocol.Topics{}.Device("gw-a", protocol.KindHeartbeat)) > 0
	})
	for kind, payload := range forged {
		if obs.saw(protocol.Topics{}.Device("gw-b", kind), payload) {
			t.Errorf("a forged %s on gw-b's topic was delivered", kind)
		}
	}
	if n := obs.count(protocol.Topics{}.Device("gw-a", protocol.KindStatus)); n > 0 {
		t.Errorf("a retained junk status was delivered %d time(s)", n)
	}
	if n := stolen.Load(); n > 0 {
		t.Errorf("gw-a was sent %d message(s) of other topics", n)
	}
	// The hub believed nothing: gw-b's ack is its own, its pod Running.
	out, _ := h.cli("describe", "device", "gw-b")
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "Observed: generation 1") {
		t.Fatalf("gw-b after the forgeries:\n%s", out)
	}
	if p, ok := h.pods(t, "gw-b")["app"]; !ok || !running(&p) {
		t.Fatalf("gw-b's app at the hub: %+v", p.Status)
	}
	d.waitPod("app", 5*time.Second, running)
	// A retained desired from gw-a would be on gw-b's topic; the one
	// retained is the hub's (signed, generation 1).
	checker, _, err := dial(t, "mqtts://"+h.addr, h.hubCredentials().tls(t), "podhub")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	checker.Subscribe(protocol.Topics{}.Device("gw-b", protocol.KindDesired), 1, func(_ mqtt.Client, m mqtt.Message) {
		select {
		case got <- m.Payload():
		default:
		}
	})
	select {
	case p := <-got:
		if strings.Contains(string(p), "forged") {
			t.Fatalf("gw-b's retained desired document is the forgery: %s", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retained desired document for gw-b")
	}
}

// A device cannot take another's client ID: gw-evil's certificate with
// client ID gw-victim is refused, and gw-victim (a real device) stays
// connected and keeps receiving its desired pods.
func TestBrokerClientIDTakeover(t *testing.T) {
	h := newPodhub(t)
	_, cfgV := h.enrol(t, "gw-victim")
	dirE, _ := h.enrol(t, "gw-evil")
	d := newDaemon(t)
	d.withConfig(cfgV + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-victim Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-victim") == "Ready"
	})
	for i := range 20 {
		if c, _, err := dial(t, "mqtts://"+h.addr, bundle(dirE).tls(t), "gw-victim"); err == nil {
			c.Disconnect(0)
			t.Fatalf("attempt %d: gw-evil's certificate connected as client gw-victim", i)
		}
	}
	// The hub's client ID too.
	if c, _, err := dial(t, "mqtts://"+h.addr, bundle(dirE).tls(t), "podhub"); err == nil {
		c.Disconnect(0)
		t.Fatal("gw-evil's certificate connected as client podhub")
	}
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("after", "Always", 1, "exec sleep 1012")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-victim"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("after", 20*time.Second, running)
	if strings.Contains(d.log.String(), "hub connection lost") {
		t.Fatalf("gw-victim lost its connection during the takeover attempts:\n%s", d.log)
	}
}

// podhub device revoke disconnects the device at once; it cannot connect
// again, also after podhub restarts; a new enrolment works.
func TestBrokerRevocation(t *testing.T) {
	h := newPodhub(t)
	dir, _ := h.enrol(t, "gw-r")
	c, lost, err := dial(t, "mqtts://"+h.addr, bundle(dir).tls(t), "gw-r")
	if err != nil {
		t.Fatal(err)
	}
	out, code := h.cli("device", "revoke", "gw-r")
	if code != 0 || !strings.Contains(out, "disconnected: gw-r") {
		t.Fatalf("revoke: %d %s", code, out)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked device is still connected 5 s after the revocation")
	}
	c.Disconnect(0)
	if _, _, err := dial(t, "mqtts://"+h.addr, bundle(dir).tls(t), "gw-r"); err == nil {
		t.Fatal("a revoked certificate connected again")
	}
	h.stop()
	h.start()
	if _, _, err := dial(t, "mqtts://"+h.addr, bundle(dir).tls(t), "gw-r"); err == nil {
		t.Fatal("a revoked certificate connected after podhub restarted")
	}
	dir2, _ := h.enrol(t, "gw-r")
	if _, _, err := dial(t, "mqtts://"+h.addr, bundle(dir2).tls(t), "gw-r"); err != nil {
		t.Fatalf("the device enrolled again: %v", err)
	}
	if out, code := h.cli("device", "revoke", "Bad_ID"); code == 0 || !strings.Contains(out, "device ID") {
		t.Fatalf("revoking an invalid ID: %d %s", code, out)
	}
}

// A flood from a device's own credentials (up to 100,000 messages over
// 45 s, reconnecting whenever the broker drops it) leaves podhub under
// 300 MiB and serving a real device. The broker's rate bucket for the
// identity (1,000 messages of burst, 100 a second, kept across
// connections) is empty after the first 1,000: from then on the flood is
// a churn of connections, each dropped once it used what refilled while
// it reconnected. 45 s of that steady state (~100 connections on a busy
// machine) is what 150 s was (~300) at the same peak RSS; the count of
// messages was never reached in either.
func TestBrokerFloodBounded(t *testing.T) {
	const floodFor = 45 * time.Second
	h := newPodhub(t)
	dirF, _ := h.enrol(t, "gw-flood")
	_, cfgR := h.enrol(t, "gw-real")
	d := newDaemon(t)
	d.withConfig(cfgR + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-real Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-real") == "Ready"
	})
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb := rssKiB(h.cmd.Process.Pid); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	junk := []byte(strings.Repeat("x", 2000))
	ack := protocol.Encode(&protocol.Ack{Device: "gw-flood", ObservedGeneration: 1})
	topics := []string{protocol.Topics{}.Device("gw-flood", protocol.KindStatus), protocol.Topics{}.Device("gw-real", protocol.KindDesired)}
	tc := bundle(dirF).tls(t)
	sent, connects := 0, 0
	deadline := time.Now().Add(floodFor)
	for sent < 100000 && time.Now().Before(deadline) {
		c, lost, err := dial(t, "mqtts://"+h.addr, tc, "gw-flood")
		connects++
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
	burst:
		for sent < 100000 {
			select {
			case <-lost:
				break burst
			default:
			}
			if !c.IsConnectionOpen() {
				break burst
			}
			if sent%100 == 0 {
				c.Publish(protocol.Topics{}.Device("gw-flood", protocol.KindAck), 0, true, ack)
			} else {
				c.Publish(topics[sent%2], 0, false, junk)
			}
			sent++
		}
		c.Disconnect(0)
	}
	close(stopSampling)
	<-sampled
	t.Logf("flood: %d messages over %d connections; podhub peak RSS %.1f MiB", sent, connects, float64(peak.Load())/1024)
	if connects < 20 {
		t.Fatalf("the flood made %d connections in %v, want at least 20: it did not churn", connects, floodFor)
	}
	if peak.Load() > 300*1024 {
		t.Fatalf("podhub peaked at %.1f MiB under the flood, over 300 MiB", float64(peak.Load())/1024)
	}
	// The real device is still served.
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("after-flood", "Always", 1, "exec sleep 1013")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-real"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("after-flood", 30*time.Second, running)
	waitForLong(t, 30*time.Second, "after-flood mirrored at the hub", func() bool {
		p, ok := h.pods(t, "gw-real")["after-flood"]
		return ok && running(&p)
	})
}

// nonLoopbackIP is one of this host's IPv4 addresses off loopback, or "".
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// rssKiB is a process's resident set size.
func rssKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(v, &kb)
			return kb
		}
	}
	return 0
}

// A second podhub serve on the same data directory exits and leaves the
// first's socket alone; a data directory others may write is refused;
// the fleet database and keys are private.
func TestPodhubInstanceLockAndDataDir(t *testing.T) {
	h := newPodhub(t)
	second := exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve", "--mqtt-listen", freeLoopback(t))
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another podhub serve") {
		t.Fatalf("a second serve: %v %s", err, out)
	}
	if out, code := h.cli("get", "devices"); code != 0 {
		t.Fatalf("the first serve's socket after a second serve: %s", out)
	}
	for _, f := range []string{"fleet.db", "hub.key", "pki/ca.key", "pki/broker.key", "pki/podhub.key"} {
		fi, err := os.Stat(filepath.Join(h.dataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", f, fi.Mode().Perm())
		}
	}
	h.stop()
	os.Chmod(h.dataDir, 0o777)
	cmd := exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve", "--mqtt-listen", h.addr)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lets other users write it") {
		t.Fatalf("serve with a world-writable data dir: %v %s", err, out)
	}
	os.Chmod(h.dataDir, 0o700)
}
