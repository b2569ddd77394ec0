package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	"github.com/podvisor/podvisor/sync/pki"
)

// fakeClock is the gateway's clock in tests: it moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// rig is a gateway on a real TLS listener with a CA, a token file and
// handlers that answer who asked.
type rig struct {
	t      *testing.T
	dir    string
	ca     *pki.CA
	srv    *Server
	url    string
	clock  *fakeClock
	tokens string
}

func echo(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.URL.Path, User(r.Context()))
	})
}

func newRig(t *testing.T, tweak func(*Config)) *rig {
	t.Helper()
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if _, err := pki.Init(pkiDir, nil); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.Load(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(pkiDir, pki.HTTPCert), filepath.Join(pkiDir, pki.HTTPKey)
	if _, err := ca.EnsureServer(certPath, keyPath, "podhub https", []string{"localhost", "127.0.0.1", "::1"}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	cfg := Config{Listen: "127.0.0.1:0", Cert: pair, CA: ca.Certificate(), PKIDir: pkiDir,
		TokenFile: filepath.Join(dir, "tokens"), Metrics: echo("metrics"), Dashboard: echo("dashboard"),
		Kube: echo("kube"), Now: clock.Now}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10s of Close")
		}
	})
	return &rig{t: t, dir: dir, ca: ca, srv: srv, url: "https://" + srv.Addr().String(), clock: clock, tokens: cfg.TokenFile}
}

// client trusts the CA, presents cert if given, and follows no redirect.
func (r *rig) client(cert *pki.Issued) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Certificate())
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			r.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	r.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get makes a request and returns the code, body and response.
func (r *rig) do(c *http.Client, method, path, token string, body io.Reader, hdr map[string]string) (int, string, *http.Response) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

func (r *rig) token(name string) string {
	r.t.Helper()
	tok, err := CreateToken(r.tokens, name, r.clock.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

// wantStatus checks a Kubernetes Status body.
func wantStatus(t *testing.T, body string, code int, reason string) {
	t.Helper()
	var st struct {
		Kind, APIVersion, Status, Reason string
		Code                             int
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" ||
		st.Status != "Failure" || st.Code != code || st.Reason != reason {
		t.Errorf("body %q (%v), want a v1 Status %d %s", body, err, code, reason)
	}
}

func TestOpenPathsAndRefusals(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(nil)
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body, _ := r.do(c, "GET", p, "", nil, nil); code != 200 || body != "ok" {
			t.Errorf("%s: %d %q, want 200 ok without a login", p, code, body)
		}
	}
	for _, p := range []string{"/api/v1/pods", "/apis/apps/v1", "/version", "/metrics", "/openapi/v2", "/ui/api/devices", "/nothing"} {
		code, body, _ := r.do(c, "GET", p, "", nil, nil)
		if code != 401 {
			t.Errorf("%s: %d, want 401", p, code)
		}
		wantStatus(t, body, 401, "Unauthorized")
	}
	for p, want := range map[string]string{"/": "/ui/", "/ui/devices?x=1": "/ui/login?next=%2Fui%2Fdevices%3Fx%3D1"} {
		code, _, resp := r.do(c, "GET", p, "", nil, nil)
		if code != 302 || resp.Header.Get("Location") != want {
			t.Errorf("%s: %d to %q, want 302 to %q", p, code, resp.Header.Get("Location"), want)
		}
	}
}

func TestBearerTokenRoutesAndDeletion(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Metrics = nil })
	c := r.client(nil)
	tok := r.token("ci")
	for p, want := range map[string]string{"/api/v1/pods": "kube /api/v1/pods ci", "/api": "kube /api ci",
		"/apis/apps/v1": "kube /apis/apps/v1 ci", "/version": "kube /version ci", "/openapi/v3": "kube /openapi/v3 ci",
		"/ui/devices": "dashboard /ui/devices ci"} {
		if code, body, resp := r.do(c, "GET", p, tok, nil, nil); code != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", p, code, body, want)
		} else if resp.ProtoMajor != 2 {
			t.Errorf("%s: %s, want HTTP/2 (kubectl speaks it)", p, resp.Proto)
		}
	}
	if code, body, _ := r.do(c, "GET", "/metrics", tok, nil, nil); code != 404 {
		t.Errorf("/metrics with no handler: %d %q, want 404", code, body)
	}
	if code, _, _ := r.do(c, "GET", "/api/v1/pods", tok+"x", nil, nil); code != 401 {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	if code, _, _ := r.do(c, "GET", "/api/v1/pods", "", nil, map[string]string{"Authorization": "Basic " + tok}); code != 401 {
		t.Errorf("Basic: %d, want 401", code)
	}
	if err := DeleteToken(r.tokens, "ci"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := r.do(c, "GET", "/api/v1/pods", tok, nil, nil); code != 401 {
		t.Errorf("a deleted token: %d, want 401 without a restart", code)
	}
	tok2 := r.token("ci")
	if code, body, _ := r.do(c, "GET", "/api", tok2, nil, nil); code != 200 || body != "kube /api ci" {
		t.Errorf("a new token: %d %q", code, body)
	}
}

func TestUserCertificatesNotDevices(t *testing.T) {
	r := newRig(t, nil)
	alice, err := r.ca.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	device, err := r.ca.IssueDevice("gw-1")
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := r.do(r.client(&alice), "GET", "/api/v1/nodes", "", nil, nil); code != 200 || body != "kube /api/v1/nodes alice" {
		t.Errorf("a user's certificate: %d %q", code, body)
	}
	dc := r.client(&device)
	code, body, _ := r.do(dc, "GET", "/api/v1/nodes", "", nil, nil)
	if code != 401 {
		t.Errorf("a device's certificate: %d %q, want 401", code, body)
	}
	wantStatus(t, body, 401, "Unauthorized")
	if code, _, resp := r.do(dc, "GET", "/ui/", "", nil, nil); code != 302 || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("a device's certificate on the dashboard: %d, want the login page", code)
	}
	if _, err := r.ca.RevokeUser("alice"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := r.do(r.client(&alice), "GET", "/api/v1/nodes", "", nil, nil); code != 401 {
		t.Errorf("a revoked user's certificate: %d, want 401 without a restart", code)
	}
}

// login posts the form and returns the session cookie.
func (r *rig) login(c *http.Client, token string) (int, *http.Cookie) {
	r.t.Helper()
	form := url.Values{"token": {token}, "next": {"/ui/pods?ns=a"}}
	code, _, resp := r.do(c, "POST", "/ui/login", "", strings.NewReader(form.Encode()),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			return code, ck
		}
	}
	return code, nil
}

func TestCookieLogin(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(nil)
	tok := r.token("alice")
	code, body, resp := r.do(c, "GET", "/ui/login", "", nil, nil)
	if code != 200 || !strings.Contains(body, `name="token"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("login page: %d %q", code, body)
	}
	if code, ck := r.login(c, "wrong"); code != 401 || ck != nil {
		t.Errorf("a wrong token: %d, cookie %v; want 401 and none", code, ck)
	}
	code, ck := r.login(c, tok)
	if code != 303 || ck == nil {
		t.Fatalf("login: %d, cookie %v", code, ck)
	}
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge != 12*3600 || len(ck.Value) < 40 {
		t.Errorf("cookie %+v: want HttpOnly, Secure, SameSite=Strict, Path=/, 12h, random", ck)
	}
	withCookie := map[string]string{"Cookie": sessionCookie + "=" + ck.Value}
	if code, body, _ := r.do(c, "GET", "/ui/api/devices", "", nil, withCookie); code != 200 || body != "dashboard /ui/api/devices alice" {
		t.Errorf("with the cookie: %d %q", code, body)
	}
	if code, _, resp := r.do(c, "GET", "/ui/login", "", nil, withCookie); code != 302 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("the login page when logged in: %d %q, want 302 /ui/", code, resp.Header.Get("Location"))
	}
	// Another site's form is refused.
	form := url.Values{"token": {tok}}
	if code, _, _ := r.do(c, "POST", "/ui/login", "", strings.NewReader(form.Encode()),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}); code != 403 {
		t.Errorf("a login posted from another origin: %d, want 403", code)
	}
	// Logout ends it.
	code, _, resp = r.do(c, "POST", "/ui/logout", "", nil, withCookie)
	if code != 303 || resp.Header.Get("Location") != "/ui/login" {
		t.Errorf("logout: %d %q", code, resp.Header.Get("Location"))
	}
	if cl := resp.Cookies(); len(cl) != 1 || cl[0].MaxAge >= 0 {
		t.Errorf("logout cookies %v, want the session's cleared", cl)
	}
	if code, _, _ := r.do(c, "GET", "/ui/api/devices", "", nil, withCookie); code != 401 {
		t.Errorf("after logout: %d, want 401", code)
	}
	// A session ends after 12 hours, and when its token is deleted.
	_, ck = r.login(c, tok)
	withCookie = map[string]string{"Cookie": sessionCookie + "=" + ck.Value}
	r.clock.Add(12*time.Hour - time.Second)
	if code, _, _ := r.do(c, "GET", "/ui/x", "", nil, withCookie); code != 200 {
		t.Errorf("before 12h: %d, want 200", code)
	}
	r.clock.Add(time.Second)
	if code, _, _ := r.do(c, "GET", "/ui/x", "", nil, withCookie); code != 302 {
		t.Errorf("after 12h: %d, want 302 to the login", code)
	}
	_, ck = r.login(c, tok)
	withCookie = map[string]string{"Cookie": sessionCookie + "=" + ck.Value}
	if err := DeleteToken(r.tokens, "alice"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := r.do(c, "GET", "/ui/x", "", nil, withCookie); code != 302 {
		t.Errorf("token deleted: %d, want 302 to the login", code)
	}
}

func TestFailedLoginsBoundedPerAddress(t *testing.T) {
	r := newRig(t, func(c *Config) { c.LoginBurst, c.LoginRefill = 3, time.Minute })
	c := r.client(nil)
	tok := r.token("ci")
	for i := range 3 {
		if code, _, _ := r.do(c, "GET", "/api", fmt.Sprintf("guess-%d", i), nil, nil); code != 401 {
			t.Fatalf("guess %d: %d, want 401", i, code)
		}
	}
	code, body, resp := r.do(c, "GET", "/api", tok, nil, nil)
	if code != 429 || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("after 3 failures even a good token: %d Retry-After %q, want 429 60", code, resp.Header.Get("Retry-After"))
	}
	wantStatus(t, body, 429, "TooManyRequests")
	if code, _ := r.login(c, tok); code != 429 {
		t.Errorf("the login form after 3 failures: %d, want 429", code)
	}
	// A user's certificate is no guess: it still enters.
	alice, _ := r.ca.IssueUser("alice")
	if code, _, _ := r.do(r.client(&alice), "GET", "/api", "", nil, nil); code != 200 {
		t.Errorf("a certificate from the limited address: %d, want 200", code)
	}
	r.clock.Add(time.Minute)
	if code, _, _ := r.do(c, "GET", "/api", tok, nil, nil); code != 200 {
		t.Errorf("a minute later: %d, want 200", code)
	}
	if code, _, _ := r.do(c, "GET", "/api", "guess", nil, nil); code != 401 {
		t.Errorf("one more guess: %d, want 401", code)
	}
	if code, _, _ := r.do(c, "GET", "/api", tok, nil, nil); code != 429 {
		t.Errorf("then: %d, want 429", code)
	}
}

func TestLongRunningBoundedAndFlushed(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	watch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "first %s\n", User(r.Context()))
		http.NewResponseController(w).Flush()
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	r := newRig(t, func(c *Config) { c.Kube, c.MaxLongRunning = watch, 1 })
	c := r.client(nil)
	tok := r.token("ci")
	req, _ := http.NewRequest("GET", r.url+"/api/v1/pods?watch=1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first ci\n" {
		t.Fatalf("the watch's first line: %q %v (not flushed?)", line, err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch handler did not start within 10s")
	}
	code, body, _ := r.do(c, "GET", "/api/v1/pods?watch=true", tok, nil, nil)
	if code != 429 {
		t.Errorf("a second watch over the bound of 1: %d, want 429", code)
	}
	wantStatus(t, body, 429, "TooManyRequests")
	close(release)
}

func TestHeaderSizeBounded(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(nil)
	tr := c.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	code, _, _ := r.do(c, "GET", "/healthz", "", nil, map[string]string{"X-Big": strings.Repeat("a", 64<<10)})
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers: %d, want 431", code)
	}
}

func TestServerCertificateNames(t *testing.T) {
	r := newRig(t, nil)
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Certificate())
	for _, name := range []string{"localhost", "127.0.0.1"} {
		conn, err := tls.Dial("tcp", r.srv.Addr().String(), &tls.Config{RootCAs: pool, ServerName: name})
		if err != nil {
			t.Errorf("TLS as %s: %v", name, err)
			continue
		}
		conn.Close()
	}
	if _, err := tls.Dial("tcp", r.srv.Addr().String(), &tls.Config{ServerName: "localhost"}); err == nil {
		t.Error("a client without podhub's CA trusted the server")
	}
}

// Requests under way are bounded; the health endpoints answer past the
// bound; each request is logged at debug with its user.
func TestRequestsBoundedAndLogged(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	var logs syncBuffer
	r := newRig(t, func(c *Config) {
		c.Kube, c.MaxRequests = slow, 1
		c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	c := r.client(nil)
	tok := r.token("ci")
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", r.url+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach its handler within 10s")
	}
	code, body, resp := r.do(c, "GET", "/api/v1/pods", tok, nil, nil)
	if code != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a second request over the bound of 1: %d Retry-After %q", code, resp.Header.Get("Retry-After"))
	}
	wantStatus(t, body, 429, "TooManyRequests")
	if code, _, _ := r.do(c, "GET", "/readyz", "", nil, nil); code != 200 {
		t.Errorf("/readyz at the bound: %d, want 200", code)
	}
	close(release)
	select {
	case code := <-done:
		if code != 200 {
			t.Errorf("the first request: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end within 10s of its release")
	}
	if !strings.Contains(logs.String(), `msg="http request" method=GET path=/api/v1/nodes user=ci code=200`) {
		t.Errorf("no debug line for the request with its user:\n%s", logs.String())
	}
}

// syncBuffer is a log the code under test writes while the test reads it.
type syncBuffer = syncbuf.Buffer

// A WebSocket opens only with a bearer token (its header, or the API
// server's subprotocol for browsers), never with a client certificate or
// the session cookie, which a browser sends to any page's WebSocket.
func TestWebSocketOnlyWithABearerToken(t *testing.T) {
	r := newRig(t, nil)
	tok := r.token("ci")
	alice, err := r.ca.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	// WebSockets upgrade HTTP/1.1 connections.
	h1 := func(cert *pki.Issued) *http.Client {
		c := r.client(cert)
		tr := c.Transport.(*http.Transport)
		tr.ForceAttemptHTTP2 = false
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		return c
	}
	ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range ws {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	c := h1(nil)
	if code, body, _ := r.do(c, "GET", "/api/v1/pods?watch=1", tok, nil, ws); code != 200 || body != "kube /api/v1/pods ci" {
		t.Errorf("a token in Authorization: %d %q", code, body)
	}
	proto := "base64.binary.k8s.io, " + bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(tok))
	if code, body, _ := r.do(c, "GET", "/api/v1/pods?watch=1", "", nil, with(map[string]string{"Sec-WebSocket-Protocol": proto})); code != 200 || body != "kube /api/v1/pods ci" {
		t.Errorf("a token in the subprotocol: %d %q", code, body)
	}
	bad := bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(tok+"x"))
	if code, _, _ := r.do(c, "GET", "/api/v1/pods?watch=1", "", nil, with(map[string]string{"Sec-WebSocket-Protocol": bad})); code != 401 {
		t.Errorf("a wrong token in the subprotocol: %d, want 401", code)
	}
	// alice's certificate reads the API, but opens no WebSocket.
	ac := h1(&alice)
	if code, _, _ := r.do(ac, "GET", "/api/v1/pods", "", nil, nil); code != 200 {
		t.Errorf("alice's certificate: %d, want 200", code)
	}
	code, body, _ := r.do(ac, "GET", "/api/v1/pods?watch=1", "", nil, ws)
	if code != 401 {
		t.Errorf("a WebSocket with only a client certificate: %d %q, want 401", code, body)
	}
	wantStatus(t, body, 401, "Unauthorized")
	_, ck := r.login(c, tok)
	if ck == nil {
		t.Fatal("no session cookie")
	}
	cookie := map[string]string{"Cookie": sessionCookie + "=" + ck.Value}
	if code, _, _ := r.do(c, "GET", "/ui/api/devices", "", nil, cookie); code != 200 {
		t.Errorf("the cookie: %d, want 200", code)
	}
	if code, _, _ := r.do(c, "GET", "/api/v1/pods?watch=1", "", nil, with(cookie)); code != 401 {
		t.Errorf("a WebSocket with only the session cookie: %d, want 401", code)
	}
}
