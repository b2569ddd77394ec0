package devmetrics

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/podvisor/podvisor/metrics"
)

// Bounds of the listener: a scraper is one client a few times a minute.
const (
	// MaxScrapes is how many scrapes are served at once; more get 503.
	MaxScrapes = 3
	// maxTokenBytes bounds a bearer token file.
	maxTokenBytes = 4096
)

// Handler serves /metrics, /metrics/resource and /metrics/probes. A
// non-empty token is required of every request as "Authorization:
// Bearer TOKEN", compared in constant time.
type Handler struct {
	Collector *Collector
	Token     []byte
	Log       *slog.Logger
	slots     chan struct{}
	// lastSize is the last exposition's size, to size the next one's
	// buffer.
	lastSize atomic.Int64
}

// NewHandler returns a handler with its scrape bound.
func NewHandler(c *Collector, token []byte, log *slog.Logger) *Handler {
	return &Handler{Collector: c, Token: token, Log: log, slots: make(chan struct{}, MaxScrapes)}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.Token) > 0 && !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="podvisor metrics"`)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	var write func(*metrics.Writer)
	switch r.URL.Path {
	case "/metrics":
		write = h.Collector.All
	case "/metrics/resource":
		write = h.Collector.Resource
	case "/metrics/probes":
		write = h.Collector.Probes
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		http.Error(w, fmt.Sprintf("more than %d scrapes at once", MaxScrapes), http.StatusServiceUnavailable)
		return
	}
	var mw metrics.Writer
	mw.Grow(int(h.lastSize.Load()) * 9 / 8) // the last size and some: one buffer, not a doubling series
	write(&mw)
	h.lastSize.Store(int64(len(mw.Bytes())))
	if err := mw.Err(); err != nil {
		// A bug of ours, not the scraper's: say so, serve nothing half-made.
		h.Log.Error("metrics exposition", "err", err)
		http.Error(w, "metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	if r.Method == http.MethodHead {
		return
	}
	w.Write(mw.Bytes())
}

func (h *Handler) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), h.Token) == 1
}

// ReadToken reads a bearer token file: its content without surrounding
// white space, which must not be empty.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics.bearerTokenFile: %w", err)
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("metrics.bearerTokenFile: %w", err)
	}
	if len(buf) > maxTokenBytes {
		return nil, fmt.Errorf("metrics.bearerTokenFile %s: longer than %d bytes", path, maxTokenBytes)
	}
	tok := []byte(strings.TrimSpace(string(buf)))
	if len(tok) == 0 {
		return nil, fmt.Errorf("metrics.bearerTokenFile %s is empty", path)
	}
	return tok, nil
}

// Listen opens the listener: a TCP address, or a unix socket (a stale
// socket file is replaced; the socket is 0660).
func Listen(network, address string) (net.Listener, error) {
	if network == "unix" {
		if st, err := os.Lstat(address); err == nil && st.Mode()&os.ModeSocket != 0 {
			os.Remove(address)
		}
		ln, err := net.Listen("unix", address)
		if err != nil {
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
		if err := os.Chmod(address, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
		return ln, nil
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen: %w", err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, with bounded headers and
// timeouts, and closes ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 8 << 10}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), time.Second)
			srv.Shutdown(shut)
			cancel()
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
