// Package api is podvisor's local HTTP+JSON API on a unix socket, and the
// client the CLI uses.
//
//	GET /v1/pods[?watch=VERSION]            v1.PodList (watch: long-poll until newer)
//	GET /v1/pods/{ns}/{name}                v1.Pod
//	GET /v1/pods/{ns}/{name}/events         []Event
//	GET /v1/pods/{ns}/{name}/log?container=C&previous=1&follow=1   text
//	DELETE /v1/pods/{ns}/{name}?gracePeriod=N&force=1   DeleteResult
//	PUT /v1/pods/{ns}/{name}/conditions/{type}  {"status":"True"|"False"}
//	GET /v1/node                            v1.Node
//	GET /v1/stats                           []PodStats
//	POST /v1/node/drain, /v1/node/uncordon
//	GET /v1/version                         Version
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Event is a Kubernetes-style event about a pod.
type Event struct {
	FirstTime time.Time `json:"firstTimestamp"`
	LastTime  time.Time `json:"lastTimestamp"`
	Count     int       `json:"count"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
}

// LogRef locates one container instance's log.
type LogRef struct {
	Path       string
	InstanceID string
	Running    bool
	// Reader is the runtime that wrote it, which reads it back (nil: none
	// on this device can).
	Reader runtime.LogReader
}

// Version describes the daemon.
type Version struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// PodStats is one pod's resource usage, from its cgroups.
type PodStats struct {
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	Time       time.Time        `json:"time"`
	Usage      Usage            `json:"usage"`
	Containers []ContainerStats `json:"containers"`
	// Net is the pod's traffic since counting began (the daemon's start
	// or the pod's, whichever is later, for eBPF counters); absent when
	// nothing counts it.
	Net *NetStats `json:"net,omitempty"`
}

// NetStats is a pod's network traffic: Rx received, Tx sent.
type NetStats struct {
	// Source is where the counters come from: ebpf-cgroup-skb (the
	// packets' IP length) or veth (the host side's frame counters).
	Source    string `json:"source"`
	RxBytes   uint64 `json:"rxBytes"`
	RxPackets uint64 `json:"rxPackets"`
	TxBytes   uint64 `json:"txBytes"`
	TxPackets uint64 `json:"txPackets"`
}

// ContainerStats is one container's usage.
type ContainerStats struct {
	Name  string `json:"name"`
	Usage Usage  `json:"usage"`
}

// Usage is cumulative CPU time, memory working set and tasks.
type Usage struct {
	CPUNanos         uint64 `json:"cpuNanos"`
	MemoryWorkingSet uint64 `json:"memoryWorkingSetBytes"`
	Tasks            uint64 `json:"tasks"`
}

// DeleteResult says what a delete did.
type DeleteResult struct {
	Source    string `json:"source"`
	File      string `json:"file,omitempty"`
	Recreated bool   `json:"recreated"` // its source still asks for it
}

// Backend is what the API serves from; the daemon gives it (supervisor's Daemon.API).
type Backend interface {
	// Delete terminates a pod, with an optional grace period in seconds
	// that can only shorten, or at once with force.
	Delete(namespace, name string, grace *int64, force bool) (DeleteResult, error)
	// Node describes the device.
	Node() (*v1.Node, error)
	// Stats reads every running pod's usage.
	Stats() ([]PodStats, error)
	// Drain stops every pod by priority bucket and admits none until
	// Uncordon; it returns when no pod runs.
	Drain(reason string) error
	Uncordon() error
	// SetCondition sets a readiness-gate condition.
	SetCondition(namespace, name string, typ v1.PodConditionType, status bool) error
	// Pods returns the current pods, their version, and a channel closed
	// when a newer version is published.
	Pods() ([]*v1.Pod, uint64, <-chan struct{})
	Events(namespace, name string) []Event
	// Log locates a container's current or previous log.
	Log(namespace, name, container string, previous bool) (LogRef, error)
	ImageBackend
}

// Server serves a Backend on a unix socket.
type Server struct {
	Backend Backend
	Version Version
	// Log receives the socket's troubles (default slog.Default()).
	Log  *slog.Logger
	http *http.Server
	sock *socket
}

// Listen locks the socket path (<socket>.lock) and binds it. A path held by
// another live daemon is an error, and that daemon's socket is left alone;
// a stale socket is replaced. Call it before Serve to fail early.
func (s *Server) Listen(path string) error {
	if s.sock != nil {
		return fmt.Errorf("API socket %s: already listening", s.sock.path)
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("API socket directory: %w", err)
	}
	lock, err := lockSocket(path)
	if err != nil {
		return err
	}
	k := &socket{path: path, lock: lock, log: s.Log}
	if err := k.startWatch(); err != nil {
		s.Log.Warn("the API socket will not be re-created if deleted", "err", err)
	}
	if _, err := k.listen(); err != nil {
		k.close()
		return err
	}
	s.sock = k
	return nil
}

// Serve serves until ctx ends, listening first if Listen was not called.
// The socket is re-created if it is deleted while the daemon runs.
func (s *Server) Serve(ctx context.Context, socket string) error {
	if s.sock == nil {
		if err := s.Listen(socket); err != nil {
			return err
		}
	}
	defer s.sock.close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Version) })
	mux.HandleFunc("GET /v1/pods", s.listPods)
	mux.HandleFunc("POST /v1/node/drain", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Backend.Drain("podvisor drain"); err != nil {
			httpError(w, http.StatusConflict, "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/node/uncordon", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Backend.Uncordon(); err != nil {
			httpError(w, http.StatusConflict, "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Backend.Stats()
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /v1/node", func(w http.ResponseWriter, r *http.Request) {
		n, err := s.Backend.Node()
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		writeJSON(w, n)
	})
	mux.HandleFunc("GET /v1/pods/{ns}/{name}", s.getPod)
	mux.HandleFunc("GET /v1/pods/{ns}/{name}/events", s.events)
	mux.HandleFunc("GET /v1/pods/{ns}/{name}/log", s.log)
	mux.HandleFunc("DELETE /v1/pods/{ns}/{name}", s.deletePod)
	mux.HandleFunc("PUT /v1/pods/{ns}/{name}/conditions/{type}", s.setCondition)
	s.imageRoutes(mux)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	failed := make(chan error, 1)
	serve := func(ln net.Listener) {
		go func() {
			if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) && !isClosed(err) {
				select {
				case failed <- err:
				default:
				}
			}
		}()
	}
	s.sock.mu.Lock()
	serve(s.sock.ln)
	s.sock.mu.Unlock()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	s.sock.watch(watchCtx, serve)
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	stopWatch()
	shut, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.http.Shutdown(shut)
	return err
}

func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	pods, version, changed := s.Backend.Pods()
	if q := r.URL.Query().Get("watch"); q != "" {
		since, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			httpError(w, http.StatusBadRequest, "watch: %q is not a version number", q)
			return
		}
		for version <= since {
			select {
			case <-changed:
			case <-r.Context().Done():
				return
			}
			pods, version, changed = s.Backend.Pods()
		}
	}
	list := v1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(version, 10)}}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	writeJSON(w, list)
}

func (s *Server) find(w http.ResponseWriter, r *http.Request) *v1.Pod {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	pods, _, _ := s.Backend.Pods()
	for _, p := range pods {
		if p.Namespace == ns && p.Name == name {
			return p
		}
	}
	httpError(w, http.StatusNotFound, "pod %q not found in namespace %q", name, ns)
	return nil
}

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	if p := s.find(w, r); p != nil {
		writeJSON(w, p)
	}
}

func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var grace *int64
	if g := q.Get("gracePeriod"); g != "" {
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil || n < 0 {
			httpError(w, http.StatusBadRequest, "gracePeriod: %q is not a whole number of seconds >= 0", g)
			return
		}
		grace = &n
	}
	force := q.Get("force") == "1"
	if force && (grace == nil || *grace != 0) {
		httpError(w, http.StatusBadRequest, "force requires gracePeriod=0")
		return
	}
	res, err := s.Backend.Delete(r.PathValue("ns"), r.PathValue("name"), grace, force)
	if err != nil {
		httpError(w, http.StatusNotFound, "%v", err)
		return
	}
	writeJSON(w, res)
}

func (s *Server) setCondition(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Status v1.ConditionStatus `json:"status"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (body.Status != v1.ConditionTrue && body.Status != v1.ConditionFalse) {
		httpError(w, http.StatusBadRequest, `body must be {"status": "True"} or {"status": "False"}`)
		return
	}
	err := s.Backend.SetCondition(r.PathValue("ns"), r.PathValue("name"), v1.PodConditionType(r.PathValue("type")), body.Status == v1.ConditionTrue)
	if err != nil {
		httpError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if p := s.find(w, r); p != nil {
		writeJSON(w, s.Backend.Events(p.Namespace, p.Name))
	}
}

func (s *Server) log(w http.ResponseWriter, r *http.Request) {
	p := s.find(w, r)
	if p == nil {
		return
	}
	q := r.URL.Query()
	container := q.Get("container")
	if container == "" {
		if len(p.Spec.Containers) != 1 {
			httpError(w, http.StatusBadRequest, "pod %q has %d containers: choose one with -c", p.Name, len(p.Spec.Containers))
			return
		}
		container = p.Spec.Containers[0].Name
	}
	ref, err := s.Backend.Log(p.Namespace, p.Name, container, q.Get("previous") == "1")
	if err != nil {
		httpError(w, http.StatusNotFound, "%v", err)
		return
	}
	if ref.Reader == nil {
		httpError(w, http.StatusNotFound, "no runtime on this device reads the log of container %q", container)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if q.Get("follow") != "1" || !ref.Running {
		ref.Reader.CopyLog(w, ref.Path)
		return
	}
	fw := flushWriter{w: w}
	ref.Reader.FollowLog(r.Context(), fw, ref.Path, instanceEnded(r.Context(), s.Backend, p.Namespace, p.Name, container, ref.InstanceID))
}

// instanceEnded closes the returned channel once the followed instance is
// no longer the running one.
func instanceEnded(ctx context.Context, b Backend, ns, name, container, id string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, _, changed := b.Pods()
			ref, err := b.Log(ns, name, container, false)
			if err != nil || ref.InstanceID != id || !ref.Running {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return done
}

type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }
func (f flushWriter) Flush() {
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(apiError{Error: fmt.Sprintf(format, args...)})
}
