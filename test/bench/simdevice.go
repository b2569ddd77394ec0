package main

import (
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// enrolment is what simulated devices take from podhub's data directory:
// its CA, which issues each device's certificate as podhub device add
// does, and the hub's public key, which signs their desired documents.
type enrolment struct {
	ca     *pki.CA
	hubKey ed25519.PublicKey
	broker string // mqtts://host:port
}

func loadEnrolment(data, brokerAddr string) (enrolment, error) {
	ca, err := pki.Load(filepath.Join(data, "pki"))
	if err != nil {
		return enrolment{}, err
	}
	pubPEM, err := os.ReadFile(filepath.Join(data, "hub.pub"))
	if err != nil {
		return enrolment{}, err
	}
	pub, err := protocol.ParsePublicKey(pubPEM)
	if err != nil {
		return enrolment{}, fmt.Errorf("podhub's hub.pub: %w", err)
	}
	return enrolment{ca: ca, hubKey: pub, broker: "mqtts://" + brokerAddr}, nil
}

// agent is simulated device id's agent, with a certificate of its own,
// its state in st and pods as its pod side.
func (e enrolment) agent(id string, st *store.Store, pods uplink.Pods) (*uplink.Agent, error) {
	issued, err := e.ca.IssueDevice(id)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(issued.Cert, issued.Key)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{pair}}
	return uplink.New(uplink.Config{Broker: e.broker, DeviceID: id, HubKey: e.hubKey, TLS: tc,
		Heartbeat: *hubHeartbeat}, st, pods, silent)
}
