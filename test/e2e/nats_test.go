package e2e

import (
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/natstest"
)

// reconnectBound is how long a device may take to be back on another
// node after its node was killed: the cluster elects new leaders for
// the streams the node led (a few seconds), and the device's next
// attempt comes after its reconnect backoff (1 s, doubling).
const reconnectBound = 60 * time.Second

// A fleet on a three-node NATS cluster (JetStream, MQTT over TLS with
// podhub's certificates): podhub and a real podvisor daemon take the
// three URLs; a pod applied runs and its status reaches the hub; the
// node the device is on is killed with SIGKILL; the device reconnects to
// another node within reconnectBound, a new apply reaches it, its
// retained desired document is still served by the cluster, and the
// first pod never restarted; the node comes back.
func TestNATSClusterFailover(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	pki := filepath.Join(h.dataDir, "pki")
	const dev = "gw-nats"
	c := natstest.Start(t, pki, "", []string{dev})
	urls := c.URLs()
	dir := filepath.Join(t.TempDir(), dev)
	out, code := h.cli("device", "add", dev, "--out", dir, "--install-dir", dir, "--url", strings.Join(urls, ","))
	if code != 0 {
		t.Fatalf("podhub device add: %s", out)
	}
	deviceConfig, err := os.ReadFile(filepath.Join(dir, "podvisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("brokers: [%s]\ntls: {ca: %s}\n",
		strings.Join(urls, ", "), filepath.Join(pki, "ca.pem"))), 0o600)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.startCmd()
	t.Cleanup(h.stop)

	d := newDaemon(t)
	d.withConfig(string(deviceConfig) + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 60*time.Second, dev+" Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, dev) == "Ready"
	})
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("app", "Always", 1, "exec sleep 1006")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", dev); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	before := d.waitPod("app", 30*time.Second, running)
	waitForLong(t, 30*time.Second, "app mirrored", func() bool { p, ok := h.pods(t, dev)["app"]; return ok && running(&p) })

	// Kill the device's node.
	on := waitForValue(t, 10*time.Second, dev+" connected to a node", func() int { return c.NodeOf(dev) }, func(i int) bool { return i >= 0 })
	connects := strings.Count(d.log.String(), "connected to the hub")
	c.Kill(on)
	killed := time.Now()
	waitForLong(t, reconnectBound, dev+" connected again", func() bool { return strings.Count(d.log.String(), "connected to the hub") > connects })
	back := time.Since(killed)
	to := waitForValue(t, 10*time.Second, dev+" on another node", func() int { return c.NodeOf(dev) }, func(i int) bool { return i >= 0 && i != on })
	t.Logf("%s was on %s; killed; connected to %s %v later", dev, c.Nodes[on].Name, c.Nodes[to].Name, back.Round(100*time.Millisecond))

	// A new apply reaches it through the cluster.
	os.WriteFile(manifest, []byte(processPod("app2", "Always", 1, "exec sleep 1007")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", dev); code != 0 {
		t.Fatalf("apply after the failover: %s", out)
	}
	d.waitPod("app2", 60*time.Second, running)
	waitForLong(t, 60*time.Second, "app2 mirrored", func() bool { p, ok := h.pods(t, dev)["app2"]; return ok && running(&p) })

	// The retained desired document stored before the kill is served by a
	// surviving node to a new subscriber. (One stored while the cluster
	// elects new leaders may be lost: NATS 2.9 logs it and goes on; the
	// hub's catch-up and the devices' generation floor cover it,
	// docs/brokers.md.)
	hubTLS, err := natstest.HubTLS(pki)
	if err != nil {
		t.Fatal(err)
	}
	doc := waitForValue(t, 60*time.Second, "the retained desired document from "+c.Nodes[to].Name, func() []byte {
		return readRetained(urls[to], hubTLS, protocol.Topics{}.Device(dev, protocol.KindDesired))
	}, func(b []byte) bool { return b != nil })
	if !strings.Contains(string(doc), `"app"`) {
		t.Fatalf("the retained desired document lacks app: %.300s", doc)
	}
	t.Logf("the retained document holds app2 too: %v", strings.Contains(string(doc), `"app2"`))

	// The first pod never restarted: the same container instance, no
	// restart counted.
	after := d.waitPod("app", 5*time.Second, running)
	if a, b := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != 0 {
		t.Fatalf("app restarted across the failover: %s (%d restarts), was %s", a.ContainerID, a.RestartCount, b.ContainerID)
	}

	// The node comes back and takes connections again.
	c.Restart(on, hubTLS)
	waitForLong(t, 30*time.Second, dev+" Ready after its node came back (the rejoining node's catch-up may move a connection)", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, dev) == "Ready"
	})
	checkPod := func(p *v1.Pod) bool { return running(p) && p.Status.ContainerStatuses[0].RestartCount == 0 }
	d.waitPod("app", 5*time.Second, checkPod)

	// An apply made while the cluster elects: kill the node leading the
	// stream of QoS 1 messages, apply at once. NATS drops what it cannot
	// store then; the document still reaches the device: again at its
	// reconnection (the hub's catch-up) if it was on that node, at the
	// hub's if the hub was, else when the hub publishes again what the
	// broker never acknowledged (30 s; docs/brokers.md).
	leader := waitForValue(t, 20*time.Second, "the $MQTT_msgs stream's leader", func() int { return c.StreamLeader("$MQTT_msgs") },
		func(i int) bool { return i >= 0 })
	devOn, hubOn := c.NodeOf(dev), c.NodeOf("podhub")
	c.Kill(leader)
	killed = time.Now()
	os.WriteFile(manifest, []byte(processPod("app3", "Always", 1, "exec sleep 1008")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", dev); code != 0 {
		t.Fatalf("apply while the cluster elects: %s", out)
	}
	d.waitPod("app3", 120*time.Second, running)
	t.Logf("killed %s (the $MQTT_msgs leader; device on %s, hub on %s); app3 running %v later", c.Nodes[leader].Name,
		nodeName(c, devOn), nodeName(c, hubOn), time.Since(killed).Round(100*time.Millisecond))
	d.waitPod("app", 5*time.Second, checkPod)
	c.Restart(leader, hubTLS)
}

func nodeName(c *natstest.Cluster, i int) string {
	if i < 0 {
		return "none"
	}
	return c.Nodes[i].Name
}

// readRetained is the retained message on topic as url serves it to a
// new subscriber, or nil (none within 10 s, or the connection or
// subscription failed: a cluster still electing refuses them).
func readRetained(url string, tc *tls.Config, topic string) []byte {
	got := make(chan []byte, 1)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID("podhub-reader").SetTLSConfig(tc).
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		return nil
	}
	defer c.Disconnect(0)
	tok := c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
		select {
		case got <- m.Payload():
		default:
		}
	})
	if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil || tok.(*mqtt.SubscribeToken).Result()[topic] >= 0x80 {
		return nil
	}
	select {
	case b := <-got:
		return b
	case <-time.After(10 * time.Second):
		return nil
	}
}
