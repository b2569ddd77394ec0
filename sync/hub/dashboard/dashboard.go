// Package dashboard is podhub's fleet dashboard: a few pages of plain
// HTML, CSS and JavaScript (embedded, no build step, nothing fetched from
// elsewhere) over JSON read from the fleet database, kept live by
// server-sent events from the fleet's change feed (fleetwatch).
//
// It is mounted at /ui/ behind the hub's HTTPS gateway, which admits only
// logged-in viewers; it serves reads only. Everything a device reports is
// untrusted: it reaches the page as JSON and the page puts it into the
// document as text, never as markup.
package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// Prefix is where the dashboard is mounted; its handler sees whole paths.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy lets the page load and connect to nothing but the
// hub itself: no inline script or style, no frames, no plugins.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Config is what the dashboard reads.
type Config struct {
	Fleet     *fleetdb.Fleet
	Workloads *workloaddb.Store
	// Timeout is how long a device may be silent and still be Ready
	// (fleetdb.DefaultDeviceTimeout when zero).
	Timeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MaxStreams bounds the live-update streams open at once
	// (DefaultMaxStreams when zero); more are answered 503.
	MaxStreams int
	// Heartbeat is how often an idle stream sends a comment so proxies
	// keep it (DefaultHeartbeat when zero).
	Heartbeat time.Duration
	// Pods, when set, lists every pod of the fleet from memory (the
	// Kubernetes API's store, kubeapi.Server.Pods) for the pods page,
	// instead of decoding every device's pods from the fleet database at
	// each fetch. The pods are shared: read, never changed.
	Pods func() []*v1.Pod
}

// Defaults of Config.
const (
	DefaultMaxStreams = 64
	DefaultHeartbeat  = 25 * time.Second
)

// New returns the dashboard's handler, for paths under Prefix.
func New(cfg Config) http.Handler {
	if cfg.Timeout <= 0 {
		cfg.Timeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	d := &dashboard{cfg: cfg, streams: make(chan struct{}, cfg.MaxStreams)}
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{$}", d.page(static))
	mux.Handle("GET /ui/assets/", http.StripPrefix("/ui/assets/", assetServer(static)))
	mux.HandleFunc("GET /ui/api/devices", d.api(d.devices))
	mux.HandleFunc("GET /ui/api/devices/{id}", d.api(d.device))
	mux.HandleFunc("GET /ui/api/pods", d.api(d.pods))
	mux.HandleFunc("GET /ui/api/workloads", d.api(d.workloads))
	mux.HandleFunc("GET /ui/api/events", d.live)
	mux.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		replyError(w, http.StatusNotFound, "no such dashboard API path: "+r.URL.Path)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		http.NotFound(w, r)
	})
	return secure(mux)
}

type dashboard struct {
	cfg Config
	// streams holds a slot per open live-update stream.
	streams chan struct{}
}

// secure sets the headers every answer carries: the page runs only its
// own scripts, is never framed, and nothing is sniffed or cached.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// Read-only: a POST to any path, a known one too, is refused
			// before routing (the mux would answer 405 only for some).
			hd.Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// page serves the one HTML page; the pages are its views (#/devices…).
func (d *dashboard) page(static fs.FS) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := fs.ReadFile(static, "index.html")
		if err != nil {
			http.Error(w, "dashboard page missing from the build", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(data)
	}
}

// assetServer serves the embedded scripts and styles with their types
// (an ES module must be served as JavaScript), and no listing.
func assetServer(static fs.FS) http.Handler {
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
		".svg": "image/svg+xml", ".html": "text/html; charset=utf-8"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		typ, ok := types[path.Ext(name)]
		data, err := fs.ReadFile(static, name)
		if !ok || err != nil || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", typ)
		w.Write(data)
	})
}

// api serves what read returns as JSON (encoding/json escapes <, > and &,
// so no device's string can close a script or style in any context).
func (d *dashboard) api(read func(r *http.Request) (any, int, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, code, err := read(r)
		if err != nil {
			if code == 0 {
				code = http.StatusInternalServerError
			}
			replyError(w, code, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}

// Error is the body of a failed API request.
type Error struct {
	Error string `json:"error"`
}

func replyError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(Error{Error: msg})
}
