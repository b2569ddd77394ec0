package broker

import (
	"bufio"
	"crypto/tls"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/podvisor/podvisor/sync/pki"
)

// A user's certificate (podhub user add: O=podhub:users) logs in to the
// HTTPS listener only: the broker refuses it, even under a name no device
// has, while a device's certificate from the same CA is let in.
func TestBrokerRefusesUserCertificates(t *testing.T) {
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
	connack := func(issued pki.Issued, id string) byte {
		t.Helper()
		pair, err := tls.X509KeyPair(issued.Cert, issued.Key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("%s: TLS connect: %v", id, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		send(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Clean: true, Keepalive: 60}})
		r := bufio.NewReader(c)
		// CONNACK: 0x20, length 2, flags, return code.
		var pk [4]byte
		if _, err := io.ReadFull(r, pk[:]); err != nil {
			t.Fatalf("%s: waiting for CONNACK: %v", id, err)
		}
		if pk[0]>>4 != packets.Connack {
			t.Fatalf("%s: packet type %d, want CONNACK", id, pk[0]>>4)
		}
		return pk[3]
	}
	device, err := ca.IssueDevice("gw-1")
	if err != nil {
		t.Fatal(err)
	}
	if code := connack(device, "gw-1"); code != 0 {
		t.Errorf("a device's certificate: CONNACK code %#x, want accepted", code)
	}
	user, err := ca.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	if code := connack(user, "alice"); code == 0 {
		t.Error("a user's certificate was let into the broker")
	}
}
