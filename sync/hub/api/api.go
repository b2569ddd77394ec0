// Package api is podhub's HTTP+JSON API on its unix socket (devices,
// pods, applies, workloads, cordons and taints) and the client podhub's
// commands call it with.
package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/controllers"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/hub/updates"
	"github.com/podvisor/podvisor/sync/protocol"
)

// API serves the hub's HTTP+JSON API; podhub's client commands use it.
// Mirror pods are read-only here: a pod changes through apply or delete,
// which change the device's desired document.
type API struct {
	// Link publishes the desired documents an apply or delete changes.
	Link *devicelink.Link
	// Scheduler is asked for a pass after a change it reads.
	Scheduler *controllers.Scheduler
	Fleet     *fleetdb.Fleet
	Workloads *workloaddb.Store
	// Objects are the ConfigMaps and Secrets.
	Objects *objectdb.Store
	// Timeout is how long a device may be silent and still be Ready.
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// HubKey checks a pushed release signed with the hub's key; Releases
	// keeps the artifacts' bytes; Updates drives the updates.
	HubKey   ed25519.PublicKey
	Releases releases.Store
	Updates  *updates.Driver
	// Logs reads pods' logs from their devices (podhub logs); nil: none.
	Logs Logs
	// releasing serialises pushes with deletions, which prune the
	// artifacts no release names.
	releasing sync.Mutex
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// DeviceDetail is one device with its desired pods, last ack and events.
type DeviceDetail struct {
	fleetdb.Device
	Desired []json.RawMessage     `json:"desired"`
	Ack     *protocol.Ack         `json:"ack,omitempty"`
	Events  []fleetdb.DeviceEvent `json:"events"`
	// Objects is its sealing key and object index (names and versions,
	// never data); nil when it has neither.
	Objects *fleetdb.DeviceObjects `json:"objects,omitempty"`
}

// ApplyRequest sends pods to one device or to every device a selector
// matches.
type ApplyRequest struct {
	Device   string            `json:"device,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Pods     []json.RawMessage `json:"pods"`
}

// Applied is a device's new desired generation.
type Applied struct {
	Device     string `json:"device"`
	Generation int64  `json:"generation"`
}

// Handler routes the API.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices", func(w http.ResponseWriter, r *http.Request) {
		ds, err := a.Fleet.Devices(time.Now(), a.Timeout)
		reply(w, ds, err)
	})
	mux.HandleFunc("GET /v1/devices/{id}", func(w http.ResponseWriter, r *http.Request) {
		d, err := a.detail(r.PathValue("id"))
		reply(w, d, err)
	})
	mux.HandleFunc("PUT /v1/devices/{id}/labels", func(w http.ResponseWriter, r *http.Request) {
		var labels map[string]string
		if err := decodeBody(r, &labels); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, map[string]string{}, a.Fleet.SetLabels(r.PathValue("id"), labels))
	})
	mux.HandleFunc("POST /v1/apply", func(w http.ResponseWriter, r *http.Request) {
		var req ApplyRequest
		if err := decodeBody(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := a.apply(req)
		reply(w, out, err)
	})
	mux.HandleFunc("DELETE /v1/devices/{id}/pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		gen, err := a.Link.Delete(r.PathValue("id"), r.PathValue("namespace"), r.PathValue("name"))
		reply(w, Applied{Device: r.PathValue("id"), Generation: gen}, err)
	})
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		pods, err := a.Fleet.MirrorPods(r.URL.Query().Get("device"), time.Now(), a.Timeout)
		if err == nil {
			pods, err = a.withHubPods(pods, r.URL.Query().Get("device"))
		}
		list := v1.PodList{Items: pods}
		list.Kind, list.APIVersion = "PodList", "v1"
		reply(w, list, err)
	})
	a.workloadRoutes(mux)
	a.objectRoutes(mux)
	a.disruptionRoutes(mux)
	a.releaseRoutes(mux)
	a.logRoutes(mux)
	return mux
}

func (a *API) detail(id string) (DeviceDetail, error) {
	d, err := a.Fleet.GetDevice(id, time.Now(), a.Timeout)
	if err != nil {
		return DeviceDetail{}, err
	}
	out := DeviceDetail{Device: d}
	desired, err := a.Fleet.Desired(id)
	if err != nil {
		return out, err
	}
	out.Desired = desired.Pods
	if out.Ack, err = a.Fleet.LastAck(id); err != nil {
		return out, err
	}
	objs, err := a.Fleet.DeviceObjects(id)
	if err != nil {
		return out, err
	}
	if len(objs.SealKey) > 0 || objs.RefusedKey != "" || objs.Generation > 0 || len(objs.Omitted) > 0 || !objs.RevokedAt.IsZero() {
		out.Objects = &objs
	}
	out.Events, err = a.Fleet.Events(id)
	return out, err
}

func (a *API) apply(req ApplyRequest) ([]Applied, error) {
	if (req.Device == "") == (len(req.Selector) == 0) {
		return nil, errors.New("apply: name a device or a selector, not both")
	}
	if len(req.Pods) == 0 {
		return nil, errors.New("apply: no pods")
	}
	// A pod the scheduler holds is the scheduler's: a pod of the same
	// namespace/name applied by hand would clash with it on a device.
	var keys []string
	for _, raw := range req.Pods {
		ns, name := devicelink.PodKey(raw)
		keys = append(keys, ns+"/"+name)
	}
	if taken, err := a.Workloads.ScheduledKeys(keys); err != nil || len(taken) > 0 {
		if err == nil {
			err = fmt.Errorf("apply: pod %s is scheduled by the hub (podhub delete pod NAME without --device deletes it)", strings.Join(taken, ", "))
		}
		return nil, err
	}
	targets := []string{req.Device}
	if req.Device == "" {
		var err error
		if targets, err = a.Fleet.Select(req.Selector); err != nil {
			return nil, err
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("apply: no device matches %v", req.Selector)
		}
	}
	gens, err := a.Link.ApplyTo(targets, req.Pods)
	var out []Applied
	for i, gen := range gens {
		out = append(out, Applied{Device: targets[i], Generation: gen})
	}
	if err != nil && len(gens) < len(targets) {
		err = fmt.Errorf("device %s: %w", targets[len(gens)], err)
	}
	return out, err
}

func decodeBody(r *http.Request, v any) error {
	return decodeBodyUpTo(r, v, 2*protocol.MaxDesiredBytes)
}

// decodeBodyUpTo decodes a JSON body of at most limit bytes, strictly,
// refusing a NUL character in any string (the store cannot keep one).
func decodeBodyUpTo(r *http.Request, v any, limit int64) error {
	if r.ContentLength > limit {
		return fmt.Errorf("request body: %d bytes, over the %d byte limit", r.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit))
	if err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if i := protocol.FindNUL(body); i >= 0 {
		return fmt.Errorf("request body: a NUL character (\\u0000) at byte %d: no field may hold one", i)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

type apiError struct {
	Error string `json:"error"`
	// Cause and Budget detail a refused eviction (the DisruptionBudget
	// cause of the API server's status).
	Cause  string `json:"cause,omitempty"`
	Budget string `json:"budget,omitempty"`
}

// Error is an error the API answered: its HTTP status code and message,
// with the budget's cause of a refused eviction.
type Error struct {
	Code          int
	Message       string
	Cause, Budget string
}

func (e *Error) Error() string { return e.Message }

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if code, body, ok := refusalReply(err); ok {
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(body)
		return
	}
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, fleetdb.ErrNotFound) || errors.Is(err, objects.ErrNotFound) {
			code = http.StatusNotFound
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(apiError{Error: err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// ServeUnix serves the API on a unix socket until ctx ends.
func (a *API) ServeUnix(ctx context.Context, path string) error {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("API socket: %w", err)
	}
	os.Chmod(path, 0o660)
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Client calls a hub's API on its unix socket.
type Client struct{ http, upload *http.Client }

// NewClient is a client of the API at socket.
func NewClient(socket string) *Client {
	t := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	// An upload (a release's artifacts) takes as long as its bytes do.
	return &Client{http: &http.Client{Timeout: 30 * time.Second, Transport: t}, upload: &http.Client{Transport: t}}
}

// Upload posts a streamed body of contentType and decodes the reply.
func (c *Client) Upload(path, contentType string, body io.Reader, into any) error {
	req, err := http.NewRequest("POST", "http://podhub"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.upload.Do(req)
	if err != nil {
		return fmt.Errorf("podhub is not reachable (is podhub serve running with this --data-dir?): %w", err)
	}
	return decodeReply(resp, into)
}

// Do sends a request with an optional JSON body and decodes the reply.
func (c *Client) Do(method, path string, body, into any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://podhub"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("podhub is not reachable (is podhub serve running with this --data-dir?): %w", err)
	}
	return decodeReply(resp, into)
}

func decodeReply(resp *http.Response, into any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e apiError
		json.NewDecoder(resp.Body).Decode(&e)
		return &Error{Code: resp.StatusCode, Message: e.Error, Cause: e.Cause, Budget: e.Budget}
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
