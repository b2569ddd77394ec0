// Package kubeapi is a read-only Kubernetes API over the hub's fleet, for
// kubectl, k9s and Headlamp: devices are nodes, their pods mirror pods (a
// manifest file's pod named <name>-<device>, as the kubelet names mirror
// pods), the hub's workloads, PriorityClasses and PodDisruptionBudgets as
// stored. Only get, list and watch are served (and pods/log through Logs);
// every other verb is refused with the API server's 405 Status.
//
// Objects are kept in memory with the resourceVersion of their last
// change, refreshed from fleet.Changes(): a device's change re-reads that
// device and compares each object's JSON, so a watch sees ADDED, MODIFIED
// and DELETED as from an API server, replayed from a bounded ring of
// recent events (older → 410 Expired, and the client relists).
package kubeapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// Logs streams a pod's log from its device. Errors are
// k8s.io/apimachinery/pkg/api/errors StatusErrors (NotFound for no such
// pod, ServiceUnavailable for an offline device, Timeout when it does not
// answer), written to the client as a Status with their code.
type Logs interface {
	PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error
}

// Config is what the API reads.
type Config struct {
	Fleet     *fleetdb.Fleet
	Workloads *workloaddb.Store
	// Timeout is how long a device may be silent and still be Ready.
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logs serves pods/log; nil answers 503.
	Logs Logs
	// Version is the hub's version, shown by /version and as each
	// node's kubelet version when the device reports none.
	Version string
	// BookmarkInterval is how often a watch that asked for bookmarks
	// gets one (default one minute).
	BookmarkInterval time.Duration
	// Resync is how often nodes are re-read at the least (default five
	// minutes): a safety net, since they are re-read when the first Ready
	// device would pass the timeout unheard from (a device that goes
	// silent publishes nothing).
	Resync time.Duration
	// MaxWatches bounds the watches open at once (default 256); more are
	// refused with 429.
	MaxWatches int
	// Log gets the fleet reads that failed (nil: none logged).
	Log *slog.Logger
	// RingSize is how many recent changes a watch can resume from
	// (default 10,000).
	RingSize int
}

// Server is the API's http.Handler. Its refresher starts with the first
// request; Close stops it.
type Server struct {
	cfg   Config
	store *store
	ref   *refresher
	start sync.Once
	stop  context.CancelFunc
	done  chan struct{}
	// watches counts the open watches (bounded by MaxWatches).
	watches chan struct{}
}

// New makes the API over cfg's fleet.
func New(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = time.Minute
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.MaxWatches <= 0 {
		cfg.MaxWatches = 256
	}
	if cfg.RingSize <= 0 {
		cfg.RingSize = 10000
	}
	s := &Server{cfg: cfg, done: make(chan struct{}), watches: make(chan struct{}, cfg.MaxWatches)}
	s.store = newStore(cfg.RingSize, cfg.Now())
	s.ref = &refresher{cfg: cfg, store: s.store}
	return s
}

// Close stops the refresher and ends every watch.
func (s *Server) Close() {
	s.start.Do(func() { close(s.done) }) // never started: nothing runs
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	s.store.closeWatchers()
}

// ensureStarted loads the fleet once and starts following its changes.
func (s *Server) ensureStarted() {
	s.start.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		r := s.ref
		sub := s.cfg.Fleet.Changes().Subscribe()
		r.locked(r.fullResync) // before serving: a list never sees an empty fleet
		go func() {
			defer close(s.done)
			defer sub.Close()
			r.run(ctx, sub)
		}()
	})
}

// ServeHTTP routes one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.ensureStarted()
	path := strings.Trim(r.URL.Path, "/")
	switch path {
	case "version":
		s.onlyGet(w, r, func() { writeJSON(w, http.StatusOK, s.version()) })
		return
	case "api":
		s.onlyGet(w, r, func() { writeJSON(w, http.StatusOK, apiVersions()) })
		return
	case "apis":
		s.onlyGet(w, r, func() { writeJSON(w, http.StatusOK, apiGroups()) })
		return
	}
	req, err := parsePath(path)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if req.discovery {
		s.onlyGet(w, r, func() { writeJSON(w, http.StatusOK, resourceList(req.gv)) })
		return
	}
	if req.res.review {
		s.review(w, r, req)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		verb := verbOf(r.Method)
		if verb == "delete" && req.name == "" {
			verb = "deletecollection"
		}
		writeStatus(w, apierrors.NewMethodNotSupported(req.res.groupResource(), verb))
		return
	}
	switch {
	case req.sub == "log":
		s.podLogs(w, r, req)
	case req.sub != "":
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: req.res.group, Resource: req.res.name + "/" + req.sub}, req.name))
	case req.name != "":
		s.get(w, r, req)
	default:
		s.list(w, r, req)
	}
}

// onlyGet serves a discovery document to GET, refusing other verbs.
func (s *Server) onlyGet(w http.ResponseWriter, r *http.Request, serve func()) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{}, verbOf(r.Method)))
		return
	}
	serve()
}

// verbOf is the API server's verb for an HTTP method.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// writeStatus answers an error as the API server does: a Status with the
// error's code (500 for an error that is no StatusError).
func writeStatus(w http.ResponseWriter, err error) {
	st := statusOf(err)
	writeJSON(w, int(st.Code), st)
}

// statusOf is an error's Status.
func statusOf(err error) metav1.Status {
	var st metav1.Status
	if se, ok := err.(apierrors.APIStatus); ok {
		st = se.Status()
	} else {
		st = apierrors.NewInternalError(err).ErrStatus
	}
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	return st
}

// Pods lists every pod the API serves, from memory, as its device names
// it: a manifest file's pod under its own name and without the mirror
// pod's owner (the Node), a hub pod as it is. The dashboard's pods page
// reads it instead of the fleet database. The pods are shared with the
// API: read them, never change them.
func (s *Server) Pods() []*v1.Pod {
	s.ensureStarted()
	objs, _, _ := s.store.list(resPods, "", labels.Everything(), fields.Everything(), "", 0)
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		p := o.obj.(*v1.Pod)
		if o.origName != "" && o.origName != p.Name {
			cp := *p
			cp.Name, cp.OwnerReferences = o.origName, nil
			p = &cp
		}
		out = append(out, p)
	}
	return out
}
