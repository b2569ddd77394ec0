package broker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
)

// TestBrokerIdleClientStacks guards the idle cost of a connected device
// at the embedded broker: after each client has connected over TLS,
// subscribed, published and been sent a message (so its reader and a
// writer have run their deep paths), the goroutine stacks it keeps while
// idle are about 4 KiB: with the patch in third_party/mochi-mqtt-server
// its writer has ended and its reader waits on the socket in shallow
// frames (mochi v2.7.9 as released kept 16 + 8 KiB).
func TestBrokerIdleClientStacks(t *testing.T) {
	const clients = 200
	dir := t.TempDir()
	if _, err := pki.Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ServerTLS(filepath.Join(dir, pki.BrokerCert), filepath.Join(dir, pki.BrokerKey), ca)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackPort(t)
	b, err := New(Config{Address: addr, TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topics := protocol.Topics{}

	var before uint64
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range clients + 1 {
		if i == 1 {
			// Client 0 grew this goroutine's stack (TLS, encoding) and
			// the broker's shared state: measure from here.
			before = idleStacks()
		}
		id := fmt.Sprintf("idle-%03d", i)
		issued, err := ca.IssueDevice(id)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(issued.Cert, issued.Key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("client %s: TLS connect: %v", id, err)
		}
		conns = append(conns, c)
		r := bufio.NewReader(c)
		send(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Clean: true, Keepalive: 600}})
		expect(t, r, id, packets.Connack)
		send(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 4, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: topics.Device(id, protocol.KindDesired), Qos: 1}, {Filter: topics.HubPresence(), Qos: 1}}})
		expect(t, r, id, packets.Suback)
		send(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}, ProtocolVersion: 4, PacketID: 2,
			TopicName: topics.Device(id, protocol.KindPresence), Payload: []byte(`{"online":true}`)})
		expect(t, r, id, packets.Puback)
		// The hub's document, through the client's queue and writer.
		if err := b.server.Publish(topics.Device(id, protocol.KindDesired), bytes.Repeat([]byte("x"), 2048), false, 0); err != nil {
			t.Fatal(err)
		}
		expect(t, r, id, packets.Publish)
	}
	perClient := float64(idleStacks()-before) / clients / 1024
	t.Logf("idle goroutine stacks per TLS client: %.1f KiB", perClient)
	// 4 KiB measured (a goroutine parked in the poller cannot shrink to
	// 2 KiB); the margin is the runtime's stack caches.
	if perClient > 6 {
		t.Errorf("an idle client keeps %.1f KiB of goroutine stacks at the broker, want about 4 (one reader waiting on the socket, no writer)", perClient)
	}
}

// idleStacks is the stack memory in use once the collector has had the
// chance to shrink every parked goroutine's stack as far as it goes.
func idleStacks() uint64 {
	var m runtime.MemStats
	for range 5 { // each collection halves a stack at most once
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

func freeLoopbackPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func send(t *testing.T, w io.Writer, pk packets.Packet) {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	}
	if err == nil {
		_, err = w.Write(buf.Bytes())
	}
	if err != nil {
		t.Fatalf("sending packet type %d: %v", pk.FixedHeader.Type, err)
	}
}

// expect reads the next packet and fails unless it is of type want.
func expect(t *testing.T, r *bufio.Reader, client string, want byte) {
	t.Helper()
	first, err := r.ReadByte()
	if err != nil {
		t.Fatalf("client %s: waiting for packet type %d: %v", client, want, err)
	}
	var n, shift int
	for {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("client %s: reading packet type %d: %v", client, want, err)
		}
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
		shift += 7
	}
	if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
		t.Fatalf("client %s: reading packet type %d: %v", client, want, err)
	}
	if got := first >> 4; got != want {
		t.Fatalf("client %s: got packet type %d, want %d", client, got, want)
	}
}
