package gateway

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/pki"
)

// refusal is why a request was not let in.
type refusal struct {
	code  int           // 401 or 429
	why   string        // for the log; the client is told only "Unauthorized"
	retry time.Duration // 429: when to try again
	// bad: credentials were presented and refused (logged, within
	// bounds), not merely missing (a browser's first visit).
	bad bool
}

// authenticate finds who made the request: a user's client certificate,
// else a bearer token, else a session cookie. A WebSocket only by its
// bearer token.
func (s *Server) authenticate(r *http.Request) (string, *refusal) {
	if isWebSocket(r) {
		return s.websocketBearer(r)
	}
	why, bad := "no credentials", false
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert := r.TLS.PeerCertificates[0]
		user, err := s.certUser(cert)
		if err == nil {
			return user, nil
		}
		why, bad = err.Error(), true
	}
	if h := r.Header.Get("Authorization"); h != "" {
		return s.bearer(r, h)
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if user, ok := s.session(c.Value); ok {
			return user, nil
		}
		why = "session expired or logged out"
	}
	return "", &refusal{code: http.StatusUnauthorized, why: why, bad: bad}
}

// certUser is the user a verified client certificate logs in as: only a
// user's (O=podhub:users), not revoked.
func (s *Server) certUser(cert *x509.Certificate) (string, error) {
	name := cert.Subject.CommonName
	if !pki.IsUser(cert) {
		return "", fmt.Errorf("client certificate %q (serial %x) is not a user's (O=%s): a device's certificate reads nothing here", name, cert.SerialNumber, pki.UsersOrganization)
	}
	if err := pki.ValidUserName(name); err != nil {
		return "", fmt.Errorf("client certificate: %w", err)
	}
	set, err := s.revoked.current()
	if err != nil {
		return "", fmt.Errorf("client certificate %q: %w", name, err)
	}
	if set.Has(cert.SerialNumber) {
		return "", fmt.Errorf("client certificate %q (serial %x) is revoked", name, cert.SerialNumber)
	}
	return name, nil
}

// bearer checks an Authorization header: Bearer and a token of the token
// file. A wrong token spends one of the address's tries.
func (s *Server) bearer(r *http.Request, h string) (string, *refusal) {
	scheme, token, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", &refusal{code: http.StatusUnauthorized, why: "Authorization: only Bearer is accepted", bad: true}
	}
	user, _, ref := s.checkToken(remoteIP(r), strings.TrimSpace(token))
	return user, ref
}

// bearerProtocolPrefix is the Kubernetes API server's WebSocket
// subprotocol carrying a bearer token (base64url, unpadded), for clients
// that cannot set headers: a browser's WebSocket.
const bearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

// websocketBearer lets a WebSocket in by a bearer token only, in its
// Authorization header or its subprotocol, never by a client certificate
// or the session cookie: a browser sends both with a WebSocket any page
// opens, whatever its origin, so another site's page could read the fleet
// through them. A token is something such a page does not have.
func (s *Server) websocketBearer(r *http.Request) (string, *refusal) {
	if h := r.Header.Get("Authorization"); h != "" {
		return s.bearer(r, h)
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			enc, ok := strings.CutPrefix(strings.TrimSpace(p), bearerProtocolPrefix)
			if !ok {
				continue
			}
			token, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil {
				return "", &refusal{code: http.StatusUnauthorized, why: "WebSocket bearer subprotocol: not base64url", bad: true}
			}
			user, _, ref := s.checkToken(remoteIP(r), string(token))
			return user, ref
		}
	}
	return "", &refusal{code: http.StatusUnauthorized, bad: true,
		why: "a WebSocket without a bearer token (client certificates and session cookies do not open WebSockets)"}
}

// isWebSocket says the request asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
}

// checkToken looks a token up for addr, within addr's tries.
func (s *Server) checkToken(addr, token string) (string, [sha256.Size]byte, *refusal) {
	now := s.now()
	if ok, wait := s.failures.allowed(addr, now); !ok {
		return "", [sha256.Size]byte{}, &refusal{code: http.StatusTooManyRequests, why: "too many failed logins from " + addr, retry: wait, bad: true}
	}
	if len(token) == 0 || len(token) > maxTokenBytes {
		s.failures.failed(addr, now)
		return "", [sha256.Size]byte{}, &refusal{code: http.StatusUnauthorized, why: "a bearer token of " + strconv.Itoa(len(token)) + " bytes", bad: true}
	}
	sum := sha256.Sum256([]byte(token))
	user, ok, err := s.tokens.lookup(sum)
	if err != nil {
		s.log.Error("reading the token file: refusing every token", "err", err)
		return "", sum, &refusal{code: http.StatusUnauthorized, why: err.Error(), bad: true}
	}
	if !ok {
		s.failures.failed(addr, now)
		return "", sum, &refusal{code: http.StatusUnauthorized, why: "unknown bearer token", bad: true}
	}
	return user, sum, nil
}

// session is the user of a session cookie whose token still exists.
func (s *Server) session(id string) (string, bool) {
	se, ok := s.sessions.get(id, s.now())
	if !ok {
		return "", false
	}
	if _, ok, err := s.tokens.lookup(se.token); err != nil || !ok {
		s.sessions.end(id) // its token was deleted
		return "", false
	}
	return se.user, true
}

// refuse answers a request not let in: the dashboard's pages go to the
// login page; the APIs (the dashboard's included) get a Kubernetes
// Status, 401 Unauthorized or 429.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, ref *refusal) {
	s.noteRefusal(r, ref)
	if ref.code == http.StatusTooManyRequests {
		tooMany(w, r, "too many failed logins; try again later", ref.retry)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/ui/") && !strings.HasPrefix(r.URL.Path, "/ui/api/") || r.URL.Path == "/ui" {
		http.Redirect(w, r, loginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusFound)
		return
	}
	writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}

// noteRefusal logs a refusal: missing credentials at debug, refused ones
// as a warning, the first few of every 10 seconds one by one and the rest
// counted in one line.
func (s *Server) noteRefusal(r *http.Request, ref *refusal) {
	if !ref.bad {
		s.log.Debug("HTTPS request without a login", "path", r.URL.Path, "remote", r.RemoteAddr, "why", ref.why)
		return
	}
	logIt, suppressed := s.refusals.Note()
	if suppressed > 0 {
		s.log.Warn("HTTPS logins refused and not logged one by one", "count", suppressed)
	}
	if logIt {
		s.log.Warn("HTTPS login refused", "path", r.URL.Path, "remote", r.RemoteAddr, "code", ref.code, "why", ref.why)
	}
}

// tooMany answers 429 with Retry-After, as the API server does.
func tooMany(w http.ResponseWriter, _ *http.Request, msg string, retry time.Duration) {
	secs := int((retry + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, msg)
}

// writeStatus writes a failure as the API server does: a v1 Status.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
}

// revocations is the CA's revocation list, read again when crl.pem
// changes. A list that cannot be read admits no certificate.
type revocations struct {
	dir string
	ca  *x509.Certificate

	mu    sync.Mutex
	stamp fileStamp
	set   pki.RevokedSet
	err   error
}

func (rv *revocations) current() (pki.RevokedSet, error) {
	var now fileStamp
	fi, err := os.Stat(filepath.Join(rv.dir, pki.CRLFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("revocation list: %w", err)
	default:
		now = stampOf(fi)
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if now != rv.stamp || rv.set == nil && rv.err == nil {
		rv.set, rv.err = pki.LoadRevoked(rv.dir, rv.ca)
		rv.stamp = now
	}
	return rv.set, rv.err
}
