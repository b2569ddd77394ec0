// Package gateway is podhub's HTTPS listener: TLS always, and nobody in
// without a login — a bearer token (podhub token create), a user's client
// certificate from podhub's CA (O=podhub:users; a device's certificate
// is refused), or the dashboard's session cookie (/ui/login). Everyone
// who enters is a viewer; the handlers mounted behind it (the hub's
// /metrics, the dashboard under /ui/, the Kubernetes API) serve reads
// only. The health endpoints (/healthz, /livez, /readyz) and the login
// page are the only paths open to anyone.
//
// It bounds what a client may cost: header size, header read time,
// requests and long-running requests (watches, event streams, followed
// logs) under way, request bodies, and failed logins per remote address.
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/podvisor/podvisor/sync/throttle"
)

// Config is the listener's.
type Config struct {
	// Listen is the address, HOST:PORT (":0" picks a port: see Addr).
	Listen string
	// Cert is the server certificate and key.
	Cert tls.Certificate
	// CA is podhub's CA: a client certificate it issued to a user
	// (O=podhub:users) logs in as its common name.
	CA *x509.Certificate
	// PKIDir holds the CA's revocation list (crl.pem), read again when
	// it changes: a revoked user is refused at the next request.
	PKIDir string
	// TokenFile is the token file (podhub token), read again when it
	// changes.
	TokenFile string

	// The handlers mounted behind the login; nil answers 404 on its
	// paths. They see the request's path unchanged (the dashboard gets
	// /ui/..., the Kubernetes API /api/...) and the user in its context
	// (User).
	Metrics   http.Handler // /metrics
	Dashboard http.Handler // /ui/ but /ui/login and /ui/logout
	Kube      http.Handler // /api, /apis, /version, /openapi/

	// Ready are /readyz's checks (nil: always ready): the store
	// reachable, the broker connected, the leader lease's state known.
	Ready func() []Check

	// Log gets a line per request at debug level, and refusals.
	Log *slog.Logger
	// Now is the clock (tests give a fake one); nil is time.Now.
	Now func() time.Time

	// Bounds; zero is the default.
	MaxConnections int           // connections open, idle ones included (1024); more wait to be accepted
	MaxRequests    int           // requests under way (256)
	MaxLongRunning int           // watches, event streams, followed logs under way (64)
	LoginBurst     int           // failed logins an address may make at once (10)
	LoginRefill    time.Duration // after which it may make one more (6s: 10 a minute)
	SessionTTL     time.Duration // a dashboard login lasts (12h)
	MaxSessions    int           // dashboard logins held (4096)
}

// Defaults of Config's bounds.
const (
	DefaultMaxConnections = 1024
	DefaultMaxRequests    = 256
	DefaultMaxLongRunning = 64
	DefaultLoginBurst     = 10
	DefaultLoginRefill    = 6 * time.Second
	DefaultSessionTTL     = 12 * time.Hour
	DefaultMaxSessions    = 4096
	maxHeaderBytes        = 32 << 10
	maxBodyBytes          = 1 << 20
	readHeaderTimeout     = 10 * time.Second
	idleTimeout           = 2 * time.Minute
	maxAddresses          = 4096 // remote addresses whose failed logins are counted
	// tooManyMessage is the API server's words past its in-flight bound
	// (its Retry-After is 1 too).
	tooManyMessage = "Too many requests, please try again later."
)

// Server is a running listener.
type Server struct {
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	l        net.Listener
	srv      *http.Server
	tokens   *tokens
	revoked  *revocations
	sessions *sessions
	failures *failures
	refusals *throttle.Counter
	requests slots
	long     slots
}

// New checks cfg, opens the listener and returns the server; Serve
// serves it.
func New(cfg Config) (*Server, error) {
	if cfg.CA == nil || cfg.PKIDir == "" || cfg.TokenFile == "" || len(cfg.Cert.Certificate) == 0 {
		return nil, errors.New("gateway: the CA, its directory, the token file and a server certificate are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxConnections, DefaultMaxConnections)
	def(&cfg.MaxRequests, DefaultMaxRequests)
	def(&cfg.MaxLongRunning, DefaultMaxLongRunning)
	def(&cfg.LoginBurst, DefaultLoginBurst)
	def(&cfg.MaxSessions, DefaultMaxSessions)
	if cfg.LoginRefill <= 0 {
		cfg.LoginRefill = DefaultLoginRefill
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	s := &Server{cfg: cfg, log: cfg.Log, now: cfg.Now,
		tokens:   &tokens{path: cfg.TokenFile},
		revoked:  &revocations{dir: cfg.PKIDir, ca: cfg.CA},
		sessions: newSessions(cfg.SessionTTL, cfg.MaxSessions),
		failures: newFailures(cfg.LoginBurst, cfg.LoginRefill, maxAddresses),
		refusals: throttle.New(5, 10*time.Second, cfg.Now),
		requests: newSlots(cfg.MaxRequests), long: newSlots(cfg.MaxLongRunning)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if _, err := s.revoked.current(); err != nil {
		return nil, err
	}
	if _, err := s.tokens.current(); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cfg.CA)
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cfg.Cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("HTTPS listener: %w", err)
	}
	// Each connection costs a TLS handshake and buffers: past the bound,
	// new ones wait in the kernel's backlog until one closes (idle ones
	// close after 2 minutes, silent ones after 10 s).
	s.l = netutil.LimitListener(l, cfg.MaxConnections)
	s.srv = &http.Server{Handler: s, TLSConfig: tlsCfg, ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		// Handshake failures of scanners are noise, not warnings.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	return s, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Serve serves until Close; it returns nil then.
func (s *Server) Serve() error {
	if err := s.srv.ServeTLS(s.l, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the listener and ends every request under way (watches
// included).
func (s *Server) Close() error { return s.srv.Close() }

type userKey struct{}

// User is the name of who made the request: a token's name or a user
// certificate's common name ("" outside the gateway).
func User(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// WithUser returns ctx carrying user, as the gateway gives it to the
// mounted handlers (for their tests).
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// ServeHTTP routes a request: the open paths, then the login, then the
// mounted handlers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	user := ""
	defer func() {
		s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "user", user, "code", rec.code,
			"remote", r.RemoteAddr, "duration", s.now().Sub(start))
	}()
	w = rec
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz":
		Health(s.cfg.Ready, s.log).ServeHTTP(w, r)
		return
	case "/":
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	if !s.requests.take() {
		tooMany(w, r, tooManyMessage, time.Second)
		return
	}
	defer s.requests.give()
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	switch r.URL.Path {
	case loginPath:
		s.login(w, r)
		return
	case logoutPath:
		s.logout(w, r)
		return
	}
	who, refusal := s.authenticate(r)
	if refusal != nil {
		s.refuse(w, r, refusal)
		return
	}
	user = who
	r = r.WithContext(WithUser(r.Context(), user))
	if longRunning(r) {
		if !s.long.take() {
			tooMany(w, r, tooManyMessage, time.Second)
			return
		}
		defer s.long.give()
	}
	if h := s.route(r.URL.Path); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
}

// route is the mounted handler of a path, nil for none.
func (s *Server) route(path string) http.Handler {
	under := func(prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	switch {
	case path == "/metrics":
		return s.cfg.Metrics
	case strings.HasPrefix(path, "/ui/"):
		return s.cfg.Dashboard
	case under("/api"), under("/apis"), under("/version"), strings.HasPrefix(path, "/openapi/"):
		return s.cfg.Kube
	}
	return nil
}

// longRunning reports whether a request may stay open indefinitely: a
// watch, the dashboard's event stream, a followed log.
func longRunning(r *http.Request) bool {
	q := r.URL.Query()
	switch {
	case q.Get("watch") == "1" || q.Get("watch") == "true" || strings.Contains(r.URL.Path, "/watch/"):
		return true
	case strings.HasSuffix(r.URL.Path, "/log") && (q.Get("follow") == "1" || q.Get("follow") == "true"):
		return true
	case r.URL.Path == "/ui/api/events":
		return true
	}
	return false
}

// recorder notes the status code for the request log, and passes
// flushes through (watches and event streams flush).
type recorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Flush flushes the response (watches, event streams).
func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// remoteIP is the address failed logins are counted against.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
