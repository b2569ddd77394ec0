// Package natstest starts a three-node NATS cluster from Debian's
// nats-server (2.9) on loopback for tests: routes between the nodes,
// JetStream on each (its own store directory), and MQTT over TLS with
// client certificates from podhub's CA, each certificate mapped to a user
// (verify_and_map) whose permissions are the device ACL of the embedded
// broker (permissions.go). docs/brokers.md shows the same configuration
// for an operator.
package natstest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/test/prereq"
)

// Nodes is the cluster's size: the smallest with a JetStream quorum
// that survives one node's loss.
const Nodes = 3

// Bin is Debian's nats-server.
const Bin = "/usr/sbin/nats-server"

// Cluster is three nats-server processes clustered on loopback.
type Cluster struct {
	t     testing.TB // nil outside a test (StartCluster)
	dir   string
	pki   string
	Nodes [Nodes]*Node
}

// Node is one nats-server of the cluster.
type Node struct {
	Name    string
	MQTT    string // 127.0.0.1:PORT, MQTT over TLS
	Monitor string // 127.0.0.1:PORT, the HTTP monitoring endpoint
	conf    string
	mu      sync.Mutex
	cmd     *exec.Cmd
	log     *bytes.Buffer
	exited  chan struct{}
}

// Start starts the cluster with the CA, broker certificate and key in
// pkiDir (podhub init's pki/), the hub's user and one user per device
// (their certificates' common names), each confined to its own topics
// under prefix ("": protocol.DefaultPrefix). It waits until each node
// accepts the hub's MQTT connection, and stops and removes everything
// when the test ends. Without nats-server the test is skipped, or fails
// under CI=true.
func Start(t testing.TB, pkiDir, prefix string, devices []string) *Cluster {
	t.Helper()
	if _, err := os.Stat(Bin); err != nil {
		prereq.Missing(t, "nats-server (Debian's nats-server): %v", err)
	}
	c, err := configure(t.TempDir(), pkiDir, prefix, devices)
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.stop()
			if t.Failed() {
				t.Logf("%s log:\n%s", n.Name, n.Log())
			}
		}
	})
	if err := c.run(); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartCluster is Start outside a test (a benchmark's cluster): the
// nodes' files go in dir, which the caller removes after Stop; errors
// are returned, and the nodes' output is in the error of a node that
// did not start.
//
// mqtt are more settings of the nodes' mqtt block, one a string (such
// as "consumer_replicas: 1"): a benchmark's variant of the tested
// configuration.
func StartCluster(dir, pkiDir, prefix string, devices []string, mqtt ...string) (*Cluster, error) {
	if _, err := os.Stat(Bin); err != nil {
		return nil, fmt.Errorf("nats-server (Debian's nats-server): %w", err)
	}
	c, err := configure(dir, pkiDir, prefix, devices, mqtt...)
	if err != nil {
		return nil, err
	}
	if err := c.run(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop kills every node (SIGKILL) and waits for them.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.stop()
	}
}

// configure writes the nodes' configurations in dir.
func configure(dir, pkiDir, prefix string, devices []string, mqtt ...string) (*Cluster, error) {
	c := &Cluster{dir: dir, pki: pkiDir}
	// Four ports a node: route, MQTT, monitoring, client.
	ports, err := freeLoopback(4 * Nodes)
	if err != nil {
		return nil, err
	}
	var routes []string
	clusterPorts := ports[:Nodes]
	for _, p := range clusterPorts {
		routes = append(routes, "nats-route://"+p)
	}
	users, err := Authorization(prefix, devices)
	if err != nil {
		return nil, err
	}
	for i := range Nodes {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), MQTT: ports[Nodes+3*i], Monitor: ports[Nodes+3*i+1]}
		store := filepath.Join(c.dir, n.Name)
		n.conf = filepath.Join(c.dir, n.Name+".conf")
		conf := Config(n.Name, ports[Nodes+3*i+2], n.MQTT, n.Monitor, clusterPorts[i], routes, store, pkiDir) + users
		for _, m := range mqtt {
			conf = strings.Replace(conf, "\n  stream_replicas: 3\n", "\n  stream_replicas: 3\n  "+m+"\n", 1)
		}
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		c.Nodes[i] = n
	}
	return c, nil
}

// run starts the nodes and waits until each accepts the hub's MQTT
// connection.
func (c *Cluster) run() error {
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	hub, err := HubTLS(c.pki)
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := c.waitReady(n, hub, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// Config is one node's configuration without its users: its client
// port (TLS, certificates mapped to users as on MQTT), JetStream in
// store, the cluster's routes, and MQTT over TLS with client
// certificates required and mapped to users (verify_and_map). MQTT's
// streams (sessions, retained messages, QoS 1 messages) are kept on
// three replicas, so they outlive one node.
func Config(name, client, mqttAddr, monitor, cluster string, routes []string, store, pkiDir string) string {
	host := func(a string) string { h, _, _ := net.SplitHostPort(a); return h }
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	tlsBlock := fmt.Sprintf(`tls {
    cert_file: %q
    key_file: %q
    ca_file: %q
    verify_and_map: true
    timeout: 5
  }`, filepath.Join(pkiDir, pki.BrokerCert), filepath.Join(pkiDir, pki.BrokerKey), filepath.Join(pkiDir, pki.CAFile))
	return fmt.Sprintf(`server_name: %s
host: %s
port: %s
http: %q
# The MQTT payload limit of the protocol (a desired document) fits.
max_payload: 8MB
max_pending: 64MB
%s
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 1GB
}
cluster {
  name: podvisor
  listen: %q
  routes: [%s]
}
mqtt {
  host: %s
  port: %s
  %s
  # A QoS 1 message unacknowledged this long is sent again.
  ack_wait: "30s"
  max_ack_pending: 1024
  # A QoS 1 subscription's JetStream consumer keeps its state in memory,
  # on as many nodes as the streams (three): it outlives one node, and
  # costs no files (docs/brokers.md, a fleet of thousands).
  consumer_memory_storage: true
  stream_replicas: 3
}
`, name, host(client), port(client), monitor, strings.ReplaceAll(tlsBlock, "\n  ", "\n"), store, cluster, strings.Join(routes, ", "),
		host(mqttAddr), port(mqttAddr), tlsBlock)
}

// HubTLS is the TLS configuration of the hub's certificate (pki/hub.pem)
// for a test client.
func HubTLS(pkiDir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, pki.HubCert), filepath.Join(pkiDir, pki.HubKey))
	if err != nil {
		return nil, err
	}
	ca, err := pki.Load(pkiDir)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// URLs are the nodes' MQTT URLs (mqtts://127.0.0.1:PORT), in order.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, "mqtts://"+n.MQTT)
	}
	return urls
}

// Kill kills node i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.Nodes[i].stop()
}

// Restart starts node i again on its configuration and store and waits
// until it takes MQTT connections.
func (c *Cluster) Restart(i int, hub *tls.Config) {
	n := c.Nodes[i]
	if err := n.start(); err != nil {
		c.t.Fatal(err)
	}
	c.WaitReady(n, hub, 60*time.Second)
}

// WaitReady waits until n takes an MQTT connection with the hub's
// certificate (the cluster has a JetStream leader and n has MQTT's
// streams): a fresh node answers CONNECT with an error until then.
func (c *Cluster) WaitReady(n *Node, hub *tls.Config, within time.Duration) {
	c.t.Helper()
	if err := c.waitReady(n, hub, within); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) waitReady(n *Node, hub *tls.Config, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-n.exitedCh():
			return fmt.Errorf("nats-server %s exited while starting:\n%s", n.Name, n.Log())
		default:
		}
		cl := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtts://" + n.MQTT).SetClientID(pki.HubIdentity + "-ready").
			SetTLSConfig(hub).SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
		tok := cl.Connect()
		if tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			cl.Disconnect(0)
			return nil
		}
		last = tok.Error()
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("nats-server %s: MQTT on %s not ready within %v (last: %v):\n%s", n.Name, n.MQTT, within, last, n.Log())
}

// NodeOf is the index of the node the MQTT client clientID is connected
// to (its monitoring endpoint's connz lists it), or -1.
func (c *Cluster) NodeOf(clientID string) int {
	for i, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := http.Client{Timeout: 2 * time.Second}
		resp, err := cl.Get("http://" + n.Monitor + "/connz?mqtt_client=" + clientID)
		if err != nil {
			continue
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if strings.Contains(body.String(), `"mqtt_client": "`+clientID+`"`) {
			return i
		}
	}
	return -1
}

// StreamLeader is the index of the node leading JetStream stream
// stream (MQTT's are $MQTT_sess, $MQTT_msgs and $MQTT_rmsgs), as a
// running node's monitoring endpoint tells it, or -1.
func (c *Cluster) StreamLeader(stream string) int {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := http.Client{Timeout: 2 * time.Second}
		resp, err := cl.Get("http://" + n.Monitor + "/jsz?accounts=true&streams=true")
		if err != nil {
			continue
		}
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				for i, m := range c.Nodes {
					if s.Name == stream && s.Cluster.Leader == m.Name {
						return i
					}
				}
			}
		}
	}
	return -1
}

// Running tells whether the node's process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Log is what the node printed (all its runs).
func (n *Node) Log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.log == nil {
		return ""
	}
	return n.log.String()
}

func (n *Node) exitedCh() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exited
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.log == nil {
		n.log = &bytes.Buffer{}
	}
	cmd := exec.Command(Bin, "-c", n.conf)
	w := &lockedWriter{mu: &n.mu, b: n.log}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nats-server %s: %w", n.Name, err)
	}
	if err := raiseNoFile(cmd.Process.Pid); err != nil {
		fmt.Fprintf(n.log, "natstest: open files limit of %s left as it was: %v\n", n.Name, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	exited := n.exited
	go func() { cmd.Wait(); close(exited) }()
	return nil
}

// NoFile is the open files limit (RLIMIT_NOFILE, soft and hard) each
// node is given where the test may raise it (root with CAP_SYS_RESOURCE;
// some containers drop it): Linux's default ceiling (fs.nr_open). A node
// holds a descriptor for each connection and route and for JetStream's
// open files; consumers kept on disc hold several each on every node,
// and 2,000 devices' exhausted 20,000 (docs/brokers.md). Where the limit
// cannot be raised the node keeps the one it inherited, and the
// configuration's in-memory consumers keep it within that.
const NoFile = 1 << 20

// raiseNoFile sets the open files limit of the process pid to NoFile.
func raiseNoFile(pid int) error {
	return unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: NoFile, Max: NoFile}, nil)
}

// Pid is the node's process ID (0 before it started).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// stop kills the node (SIGKILL: no goodbye to its clients or peers) and
// waits for it.
func (n *Node) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// lockedWriter appends to a buffer under the node's lock.
type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// freeLoopback is n distinct free TCP addresses on 127.0.0.1: all are
// held open until all are chosen, or the kernel could hand one out twice.
func freeLoopback(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}
