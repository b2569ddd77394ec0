// Package broker is podhub's embedded MQTT broker (mochi-mqtt): the ACL of
// who publishes and reads which topics, the hooks that authenticate
// clients and bound what each costs, the TLS handshake listener, and the
// hub's own in-process client.
package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Config configures the embedded broker.
type Config struct {
	// Address is host:port. Only a loopback address may go without TLS,
	// and only in Open mode.
	Address string
	// TLS is the server's certificate and the CA that signs client
	// certificates (see ServerTLS). Required unless Open.
	TLS *tls.Config
	// Revoked are the certificates refused (SetRevoked changes them).
	Revoked pki.RevokedSet
	Prefix  string
	// Open admits anonymous clients and applies no ACL: for tests and
	// development on a loopback address only.
	Open   bool
	Limits Limits
	Log    *slog.Logger
}

// Limits bound what one client can cost the broker.
type Limits struct {
	// MaxPacketBytes is the largest packet a client may send (it is
	// refused before it is read).
	MaxPacketBytes uint32
	// A client over its message or byte rate is disconnected; zero
	// rates are unlimited.
	MessagesPerSecond, MessageBurst float64
	BytesPerSecond, ByteBurst       float64
	// ClientWritesPending is each network client's send queue (mochi
	// allocates it whole at connect: it is most of an idle client's
	// cost). The hub's own connection is the inline client, which has
	// none.
	ClientWritesPending int32
	// Inflight is how many QoS 1 messages wait for one client's
	// acknowledgement; ReceiveMaximum how many of its own it may have
	// unacknowledged.
	Inflight, ReceiveMaximum uint16
	MaxClients               int64
	// HandshakeTimeout bounds the TLS handshake and the CONNECT packet.
	HandshakeTimeout time.Duration
}

// DefaultLimits suit a device's traffic: a status batch is at most
// protocol.MaxMessageBytes, a few batches are in flight, and a reconnect
// resends at most the outbox window.
var DefaultLimits = Limits{
	MaxPacketBytes:    protocol.MaxMessageBytes + 8<<10,
	MessagesPerSecond: 100, MessageBurst: 1000,
	BytesPerSecond: 1 << 20, ByteBurst: 8 << 20,
	ClientWritesPending: 128,
	Inflight:            64, ReceiveMaximum: 32,
	MaxClients:       20000,
	HandshakeTimeout: 15 * time.Second,
}

// Broker is podhub's embedded MQTT broker, for a fleet that one machine
// serves. Larger fleets point podhub and devices at an external broker.
type Broker struct {
	server *mochi.Server
	hook   *brokerHook
	once   sync.Once
	err    error
}

// Start starts an open broker on a loopback address: anonymous
// clients, no ACL, and mochi's own generous limits (no packet size or
// rate limit), like an external broker that trusts everyone — for tests
// of what devices and the hub refuse by themselves, and development.
// podhub serve uses New with TLS and client certificates.
func Start(addr string, log *slog.Logger) (*Broker, error) {
	limits := Limits{ClientWritesPending: 8192, Inflight: 8192, ReceiveMaximum: 1024, MaxClients: math.MaxInt64,
		HandshakeTimeout: DefaultLimits.HandshakeTimeout}
	return New(Config{Address: addr, Open: true, Limits: limits, Log: log})
}

// New starts the embedded broker.
func New(cfg Config) (*Broker, error) {
	loopback, err := isLoopback(cfg.Address)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Open && !loopback:
		return nil, fmt.Errorf("broker %s: an open broker (no authentication) listens on loopback addresses only", cfg.Address)
	case !cfg.Open && cfg.TLS == nil:
		return nil, fmt.Errorf("broker %s: TLS with client certificates is required (run podhub init for the certificates)", cfg.Address)
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	lim := cfg.Limits
	caps := capabilities(lim)
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	mochiLog := slog.New(levelFilter{log.Handler(), slog.LevelError}).With("component", "broker")
	s := mochi.New(&mochi.Options{Logger: mochiLog, InlineClient: true, Capabilities: caps,
		ClientNetReadBufferSize: 1024, ClientNetWriteBufferSize: 1024, SysTopicResendInterval: math.MaxInt32})
	hook := newBrokerHook(ACL{Topics: protocol.Topics{Prefix: cfg.Prefix}}, cfg.Open, lim, log.With("component", "broker"))
	if cfg.Revoked != nil {
		hook.revoked.Store(&cfg.Revoked)
	}
	if err := s.AddHook(hook, nil); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("broker listener %s: %w", cfg.Address, err)
	}
	var nl net.Listener = deadlineListener{Listener: l, timeout: lim.HandshakeTimeout}
	if cfg.TLS != nil {
		nl = newHandshakeListener(nl, clientCertTLS(cfg.TLS, hook), lim.HandshakeTimeout, log.With("component", "broker"))
	}
	if err := s.AddListener(listeners.NewNet("mqtt", nl)); err != nil {
		l.Close()
		return nil, err
	}
	if err := s.Serve(); err != nil {
		return nil, err
	}
	return &Broker{server: s, hook: hook}, nil
}

// SetRevoked replaces the revoked certificates and disconnects at once
// every client that holds one. It returns the identities disconnected.
func (b *Broker) SetRevoked(set pki.RevokedSet) []string {
	b.hook.revoked.Store(&set)
	var out []string
	for _, cl := range b.server.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		if c := peerCertificate(cl); c != nil && set.Has(c.SerialNumber) {
			b.server.DisconnectClient(cl, packets.ErrNotAuthorized)
			out = append(out, c.Subject.CommonName)
		}
	}
	return out
}

// closeWait bounds Close: mochi v2.7.9 can deadlock closing its listeners
// while a client is being removed (Clients.GetByListener takes the
// clients' read lock twice; upstream issue 488). The patched copy in
// third_party fixes that; the bound stays, because a broker that never
// closes must not keep podhub from exiting.
const closeWait = 3 * time.Second

// Close stops the broker; it may be called more than once.
func (b *Broker) Close() error {
	b.once.Do(func() {
		done := make(chan error, 1)
		go func() { done <- b.server.Close() }()
		select {
		case b.err = <-done:
		case <-time.After(closeWait):
			b.err = fmt.Errorf("the embedded broker did not close within %v (its connections end with the process)", closeWait)
		}
	})
	return b.err
}

// capabilities are the broker's MQTT capabilities under lim.
func capabilities(lim Limits) *mochi.Capabilities {
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = lim.MaxPacketBytes
	caps.MaximumClientWritesPending = lim.ClientWritesPending
	caps.MaximumInflight = lim.Inflight
	caps.ReceiveMaximum = lim.ReceiveMaximum
	caps.MaximumClients = lim.MaxClients
	// Retained desired documents must not expire (mochi's default drops
	// every message after a day); queues are bounded by count instead.
	caps.MaximumMessageExpiryInterval = 0
	// A device that went away leaves its session for an hour at most.
	caps.MaximumSessionExpiryInterval = 3600
	caps.TopicAliasMaximum = 0
	caps.SharedSubAvailable = 0
	caps.MaximumQos = 1
	caps.Compatibilities.ObscureNotAuthorized = true
	return caps
}

// clientCertTLS is the server's TLS: a client certificate is required,
// and refused once revoked (the hook holds the revocation list).
func clientCertTLS(server *tls.Config, hook *brokerHook) *tls.Config {
	t := server.Clone()
	t.ClientAuth = tls.RequireAndVerifyClientCert
	t.VerifyConnection = func(st tls.ConnectionState) error {
		if len(st.PeerCertificates) > 0 && hook.revoked.Load().Has(st.PeerCertificates[0].SerialNumber) {
			return fmt.Errorf("certificate %x (%s) is revoked", st.PeerCertificates[0].SerialNumber, st.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	return t
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("broker address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// deadlineListener gives each connection a deadline for its handshake
// and CONNECT packet; the broker sets the keepalive deadline after.
type deadlineListener struct {
	net.Listener
	timeout time.Duration
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.timeout > 0 {
		c.SetDeadline(time.Now().Add(l.timeout))
	}
	return c, nil
}

// ServerTLS is the embedded broker's TLS: its certificate and key, and
// the CA whose client certificates it accepts.
func ServerTLS(certFile, keyFile string, ca *pki.CA) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("broker certificate: %w", err)
	}
	if ca == nil {
		return nil, errors.New("broker TLS: no CA")
	}
	pool := ca.Pool()
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// Clients counts the broker's connected clients.
func (b *Broker) Clients() int { return b.server.Clients.Len() }
