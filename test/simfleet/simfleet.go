// Package simfleet simulates devices for the hub's benchmarks and tests:
// each is a real uplink agent (its own certificate from the hub's CA, its
// own SQLite store, signed documents checked) in front of a pretend
// daemon that runs nothing.
package simfleet

import (
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// Enrolment is what simulated devices take from podhub's data directory:
// its CA, which issues each device's certificate as podhub device add
// does, and the hub's public key, which signs their desired documents.
type Enrolment struct {
	ca     *pki.CA
	hubKey ed25519.PublicKey
	broker string // mqtts://host:port
}

// LoadEnrolment reads podhub's data directory; brokerAddr is its MQTT
// listener's host:port.
func LoadEnrolment(data, brokerAddr string) (Enrolment, error) {
	ca, err := pki.Load(filepath.Join(data, "pki"))
	if err != nil {
		return Enrolment{}, err
	}
	pubPEM, err := os.ReadFile(filepath.Join(data, "hub.pub"))
	if err != nil {
		return Enrolment{}, err
	}
	pub, err := protocol.ParsePublicKey(pubPEM)
	if err != nil {
		return Enrolment{}, fmt.Errorf("podhub's hub.pub: %w", err)
	}
	return Enrolment{ca: ca, hubKey: pub, broker: "mqtts://" + brokerAddr}, nil
}

// Device is a simulated device's credentials: a certificate of its own
// from the hub's CA (issued once per ID, as podhub device add does).
type Device struct {
	ID string
	e  Enrolment
	tc *tls.Config
}

// Issue issues device id's certificate.
func (e Enrolment) Issue(id string) (Device, error) {
	issued, err := e.ca.IssueDevice(id)
	if err != nil {
		return Device{}, err
	}
	pair, err := tls.X509KeyPair(issued.Cert, issued.Key)
	if err != nil {
		return Device{}, err
	}
	return Device{ID: id, e: e, tc: &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{pair}}}, nil
}

// Agent is the device's agent (a new one each call, as a restarted
// daemon makes), with its state in st and pods as its pod side,
// heartbeating every period.
func (d Device) Agent(st *store.Store, pods uplink.Pods, heartbeat time.Duration, log *slog.Logger) (*uplink.Agent, error) {
	return uplink.New(uplink.Config{Broker: d.e.broker, DeviceID: d.ID, HubKey: d.e.hubKey, TLS: d.tc,
		Heartbeat: heartbeat}, st, pods, log)
}

// Agent issues device id's certificate and makes its agent.
func (e Enrolment) Agent(id string, st *store.Store, pods uplink.Pods, heartbeat time.Duration, log *slog.Logger) (*uplink.Agent, error) {
	d, err := e.Issue(id)
	if err != nil {
		return nil, err
	}
	return d.Agent(st, pods, heartbeat, log)
}
