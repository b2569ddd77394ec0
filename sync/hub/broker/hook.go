package broker

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/podvisor/podvisor/sync/pki"
)

// brokerHook is the embedded broker's gatekeeper: it authenticates each
// client by its certificate (the common name is its identity and must be
// its client ID), refuses revoked certificates, applies ACL to
// every publish, subscription and delivery, and disconnects a client
// over its message or byte rate. In open mode (tests only) it lets
// everyone do anything.
type brokerHook struct {
	mochi.HookBase
	acl     ACL
	open    bool
	limits  Limits
	revoked atomic.Pointer[pki.RevokedSet]
	log     *slog.Logger
	now     func() time.Time

	mu      sync.Mutex
	rates   map[string]*clientRate // by identity, so a reconnect starts no fresh burst
	logRate *tokenBucket           // refusals are logged at most this often
	quiet   int                    // refusals not logged since the last one logged
}

type clientRate struct{ messages, bytes *tokenBucket }

func newBrokerHook(acl ACL, open bool, limits Limits, log *slog.Logger) *brokerHook {
	h := &brokerHook{acl: acl, open: open, limits: limits, log: log, now: time.Now, rates: map[string]*clientRate{}}
	h.logRate = newBucket(1, 20, h.now())
	h.revoked.Store(&pki.RevokedSet{})
	return h
}

// ID names the hook in mochi's logs.
func (h *brokerHook) ID() string { return "podvisor-auth" }

// Provides lists the events the hook handles.
func (h *brokerHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPacketRead,
		mochi.OnPublish, mochi.OnDisconnect, mochi.OnSessionEstablished}, []byte{b})
}

// identity is what the client proved at connect (empty in open mode).
func identity(cl *mochi.Client) string { return string(cl.Properties.Username) }

// peerCertificate is the client's verified certificate, if it has one.
func peerCertificate(cl *mochi.Client) *x509.Certificate {
	tc, ok := cl.Net.Conn.(*tls.Conn)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return nil
	}
	return st.PeerCertificates[0]
}

// OnConnectAuthenticate admits a client whose verified certificate is
// not revoked and names the client ID it connects with, and whose last
// will (published by the broker on its behalf) the ACL allows.
func (h *brokerHook) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	// The user name carries the identity from here on: never the client's.
	cl.Properties.Username = nil
	if cl.ID == mochi.InlineClientId {
		h.refuse(cl, errors.New("client ID \"inline\" is the broker's own"))
		return false
	}
	if h.open {
		return true
	}
	cert := peerCertificate(cl)
	if cert == nil {
		h.refuse(cl, errors.New("no verified client certificate"))
		return false
	}
	if h.revoked.Load().Has(cert.SerialNumber) {
		h.refuse(cl, fmt.Errorf("certificate %x of %q is revoked", cert.SerialNumber, cert.Subject.CommonName))
		return false
	}
	if pki.IsUser(cert) {
		// A person's login to the HTTPS listener, never a device or the hub.
		h.refuse(cl, fmt.Errorf("certificate %x of %q is a user's (O=%s), not a device's", cert.SerialNumber, cert.Subject.CommonName, pki.UsersOrganization))
		return false
	}
	id := cert.Subject.CommonName
	if err := h.acl.CheckIdentity(id, cl.ID); err != nil {
		h.refuse(cl, err)
		return false
	}
	if pk.Connect.WillFlag {
		if err := h.acl.CheckPublish(id, pk.Connect.WillTopic, pk.Connect.WillRetain, len(pk.Connect.WillPayload)); err != nil {
			h.refuse(cl, fmt.Errorf("last will: %w", err))
			return false
		}
	}
	cl.Properties.Username = []byte(id)
	if id != pki.HubIdentity {
		// A device subscribes again at each connect and gets its desired
		// document retained: a session kept while it is away would only
		// queue messages it does not need.
		cl.Properties.Clean = true
	}
	return true
}

// OnSessionEstablished checks the revocation list again once the client
// is listed among the broker's clients: a revocation that came while it
// was authenticating either finds it in that list or is seen here.
func (h *brokerHook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	if h.open || cl.Net.Inline {
		return
	}
	if c := peerCertificate(cl); c != nil && h.revoked.Load().Has(c.SerialNumber) {
		h.refuse(cl, fmt.Errorf("certificate %x of %q was revoked while it connected", c.SerialNumber, c.Subject.CommonName))
		cl.Stop(packets.ErrNotAuthorized)
	}
}

// OnACLCheck decides publishes (write) by topic, and subscriptions and
// deliveries (read) by filter or topic.
func (h *brokerHook) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	if h.open || cl.Net.Inline {
		return true
	}
	var err error
	if write {
		err = h.acl.CheckPublish(identity(cl), topic, false, 0)
	} else {
		err = h.acl.CheckRead(identity(cl), topic)
	}
	if err != nil {
		h.refuse(cl, err)
		return false
	}
	return true
}

// OnPublish checks what OnACLCheck cannot see: the retain flag and the
// size. A violation closes the connection (mochi would otherwise publish
// a version 3 client's message anyway).
func (h *brokerHook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if h.open || cl.Net.Inline {
		return pk, nil
	}
	if err := h.acl.CheckPublish(identity(cl), pk.TopicName, pk.FixedHeader.Retain, len(pk.Payload)); err != nil {
		h.refuse(cl, err)
		cl.Stop(err)
		return pk, packets.ErrRejectPacket
	}
	return pk, nil
}

// OnPacketRead disconnects a client over its message or byte rate: its
// packets go unread meanwhile, so a flood costs the broker nothing, and
// the device's agent reconnects with its backoff. The hub is not
// limited: its in-process client, nor a replica of it connecting with
// the hub's certificate (it publishes every device's receipts and
// documents, as the in-process client does).
func (h *brokerHook) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || h.limits.MessagesPerSecond <= 0 || identity(cl) == pki.HubIdentity {
		return pk, nil
	}
	now := h.now()
	key := identity(cl)
	if key == "" {
		key = "client " + cl.ID // open mode
	}
	h.mu.Lock()
	r := h.rates[key]
	if r == nil {
		r = &clientRate{messages: newBucket(h.limits.MessagesPerSecond, h.limits.MessageBurst, now),
			bytes: newBucket(h.limits.BytesPerSecond, h.limits.ByteBurst, now)}
		h.rates[key] = r
	}
	ok := r.messages.allow(now, 1) && r.bytes.allow(now, float64(len(pk.Payload)+len(pk.TopicName)))
	h.mu.Unlock()
	if !ok {
		h.refuse(cl, fmt.Errorf("over the rate limit (%g messages, %g bytes a second): disconnected", h.limits.MessagesPerSecond, h.limits.BytesPerSecond))
		return pk, packets.ErrRejectPacket
	}
	return pk, nil
}

// OnDisconnect forgets an anonymous (open mode) client's rates; an
// identity's stay (one small entry per issued certificate).
func (h *brokerHook) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	if identity(cl) == "" {
		h.mu.Lock()
		delete(h.rates, "client "+cl.ID)
		h.mu.Unlock()
	}
}

// refuse logs a refusal, at most about once a second after a burst: a
// flood of refused messages must not become a flood of log lines.
func (h *brokerHook) refuse(cl *mochi.Client, err error) {
	h.mu.Lock()
	ok := h.logRate.allow(h.now(), 1)
	quiet := h.quiet
	if ok {
		h.quiet = 0
	} else {
		h.quiet++
	}
	h.mu.Unlock()
	if ok {
		h.log.Warn("broker refused", "client", cl.ID, "identity", identity(cl), "remote", cl.Net.Remote, "err", err, "unlogged", quiet)
	}
}
