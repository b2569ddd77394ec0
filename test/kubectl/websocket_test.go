package kubectl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	v1 "k8s.io/api/core/v1"
)

// wsEvent is one watch event as a WebSocket message carries it.
type wsEvent struct {
	Type   string
	Object v1.Pod
}

// dialWatch opens a watch of every pod over a WebSocket through the
// gateway, as Headlamp's server does for its pages.
func (h *hub) dialWatch(t *testing.T, header http.Header, protocols []string, cert []tls.Certificate) (*websocket.Conn, error) {
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Certificate())
	cfg, err := websocket.NewConfig("wss://"+h.addr+"/api/v1/pods?watch=1&allowWatchBookmarks=true", "https://headlamp.example")
	must(t, err)
	cfg.TlsConfig = &tls.Config{RootCAs: pool, Certificates: cert}
	cfg.Header = header
	cfg.Protocol = protocols
	return websocket.DialConfig(cfg)
}

func TestWatchOverWebSocket(t *testing.T) {
	h := newHub(t)
	conn, err := h.dialWatch(t, http.Header{"Authorization": {"Bearer " + h.token}}, nil, nil)
	if err != nil {
		t.Fatalf("a WebSocket watch with a bearer token: %v", err)
	}
	defer conn.Close()
	next := func(what string) wsEvent {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		var msg string
		if err := websocket.Message.Receive(conn, &msg); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		var e wsEvent
		if err := json.Unmarshal([]byte(msg), &e); err != nil {
			t.Fatalf("a message that is not a watch event: %v\n%s", err, msg)
		}
		return e
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		e := next("the pods as ADDED")
		if e.Type != "ADDED" {
			t.Fatalf("before every pod was listed: %s %s", e.Type, e.Object.Name)
		}
		seen[e.Object.Name] = true
	}
	if !seen["web-dev1"] || !seen["web-dev2"] || !seen["db-dev1"] {
		t.Errorf("listed %v", seen)
	}
	start := time.Now()
	h.report("dev2", podItem(filePod("web", 7)))
	for {
		e := next("web-dev2 MODIFIED")
		if e.Type == "BOOKMARK" {
			continue
		}
		if e.Type != "MODIFIED" || e.Object.Name != "web-dev2" || e.Object.Status.ContainerStatuses[0].RestartCount != 7 {
			t.Fatalf("got %s %s, want web-dev2 MODIFIED with 7 restarts", e.Type, e.Object.Name)
		}
		break
	}
	t.Logf("the change reached the WebSocket %v after it was stored", time.Since(start).Round(time.Millisecond))

	// A browser's WebSocket carries the token in the subprotocol; the
	// token's protocol is never echoed back.
	enc := base64.RawURLEncoding.EncodeToString([]byte(h.token))
	c2, err := h.dialWatch(t, nil, []string{"base64.binary.k8s.io", "base64url.bearer.authorization.k8s.io." + enc}, nil)
	if err != nil {
		t.Fatalf("a WebSocket watch with the token in its subprotocol: %v", err)
	}
	if p := c2.Config().Protocol; len(p) != 1 || strings.HasPrefix(p[0], "base64url.bearer") {
		t.Errorf("subprotocol answered %v", p)
	}
	c2.Close()

	// A user's certificate, which a browser would send to any page's
	// WebSocket, opens none.
	alice, err := h.ca.IssueUser("alice")
	must(t, err)
	pair, err := tls.X509KeyPair(alice.Cert, alice.Key)
	must(t, err)
	if c3, err := h.dialWatch(t, nil, nil, []tls.Certificate{pair}); err == nil {
		c3.Close()
		t.Errorf("a WebSocket watch with only a client certificate was opened")
	} else if !strings.Contains(err.Error(), "bad status") {
		t.Errorf("a WebSocket watch with only a client certificate: %v, want refused with a status", err)
	}
}
