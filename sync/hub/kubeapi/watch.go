package kubeapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// bookmarkOf is a bookmark's object: the kind with only its version, and
// at the end of a watch list's initial events the annotation saying so.
func bookmarkOf(res *resource, rv uint64, initialEnd bool) []byte {
	meta := map[string]any{"resourceVersion": strconv.FormatUint(rv, 10)}
	if initialEnd {
		meta["annotations"] = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	b, _ := json.Marshal(map[string]any{"kind": res.kind, "apiVersion": res.apiVersion(), "metadata": meta})
	return b
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// maxWatchTimeout bounds a watch without timeoutSeconds (the API server's
// default is 30 to 60 minutes).
const maxWatchTimeout = 30 * time.Minute

// watchWriteTimeout cuts a watcher that does not read.
const watchWriteTimeout = 10 * time.Second

// watchOptions are a watch request's parameters, checked.
type watchOptions struct {
	from      uint64
	fromList  bool // every current object as ADDED first
	watchList bool // and then a bookmark saying the list is done
	bookmarks bool
	timeout   time.Duration
	table     *tableOptions
	metadata  bool
}

func watchOptionsOf(r *http.Request) (*watchOptions, error) {
	q := r.URL.Query()
	t, err := tableOf(r)
	if err != nil {
		return nil, err
	}
	o := &watchOptions{table: t, metadata: metadataAs(r), timeout: maxWatchTimeout,
		bookmarks: q.Get("allowWatchBookmarks") == "true" || q.Get("allowWatchBookmarks") == "1"}
	rvParam := q.Get("resourceVersion")
	o.fromList = rvParam == "" || rvParam == "0"
	// A watch list (client-go's reflector with WatchListClient): the
	// current state as ADDED, then a bookmark marking its end.
	o.watchList = q.Get("sendInitialEvents") == "true"
	if o.watchList {
		if q.Get("allowWatchBookmarks") != "true" || q.Get("resourceVersionMatch") != "NotOlderThan" {
			return nil, apierrors.NewBadRequest("sendInitialEvents: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks to true")
		}
		o.fromList = true
	} else if !o.fromList {
		if o.from, err = strconv.ParseUint(rvParam, 10, 64); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion: Invalid value: %q: must be a number", rvParam))
		}
	}
	if ts := q.Get("timeoutSeconds"); ts != "" {
		n, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || n < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds: Invalid value: %q", ts))
		}
		if n > 0 && time.Duration(n)*time.Second < o.timeout {
			o.timeout = time.Duration(n) * time.Second
		}
	}
	return o, nil
}

// watch streams a resource's changes after resourceVersion (all objects
// as ADDED first when it is "" or "0"), with bookmarks when asked: as
// lines of JSON on the response, or as WebSocket messages (one event
// each, text frames, as the API server sends JSON) when the request is
// an upgrade. The gateway lets a WebSocket in only with a bearer token.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, req request, ls labels.Selector, fs fields.Selector) {
	opts, err := watchOptionsOf(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	ws := isWebSocket(r)
	if ws && r.ProtoMajor != 1 {
		writeStatus(w, apierrors.NewBadRequest("a WebSocket watch needs HTTP/1.1"))
		return
	}
	select {
	case s.watches <- struct{}{}:
		defer func() { <-s.watches }()
	default:
		writeStatus(w, apierrors.NewTooManyRequests("too many watches open on the hub", 1))
		return
	}
	if !ws {
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		rc.Flush() // the client waits for the headers before any event
		s.stream(r, req, ls, fs, opts, func(typ string, obj []byte) bool {
			line, _ := json.Marshal(watchEvent{Type: typ, Object: obj})
			rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
			if _, err := w.Write(append(line, '\n')); err != nil {
				return false
			}
			return rc.Flush() == nil
		})
		return
	}
	srv := websocket.Server{Handshake: wsHandshake, Handler: func(conn *websocket.Conn) {
		// The client sends nothing; reading notices it going away.
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			var discard [512]byte
			for {
				if _, err := conn.Read(discard[:]); err != nil {
					return
				}
			}
		}()
		s.stream(r, req, ls, fs, opts, func(typ string, obj []byte) bool {
			select {
			case <-gone:
				return false
			default:
			}
			msg, _ := json.Marshal(watchEvent{Type: typ, Object: obj})
			conn.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
			return websocket.Message.Send(conn, string(msg)) == nil
		}, gone)
	}}
	srv.ServeHTTP(hijacker{w}, r)
}

// stream sends the watch's events until the client goes, the timeout, or
// the store cuts it; done, when given, also ends it (a WebSocket closed).
func (s *Server) stream(r *http.Request, req request, ls labels.Selector, fs fields.Selector, opts *watchOptions,
	send func(typ string, obj []byte) bool, done ...<-chan struct{}) {
	var closed <-chan struct{}
	if len(done) > 0 {
		closed = done[0]
	}
	wt, replay, initial, listRV, err := s.store.watch(req.res, opts.from, opts.fromList)
	encode := func(o *object) []byte {
		if opts.metadata {
			return partial(o)
		}
		if opts.table == nil {
			return o.raw
		}
		b, _ := json.Marshal(s.table(opts.table, req.res, []*object{o}))
		return b
	}
	if err != nil { // 410 Expired: an ERROR event, as the watch cache sends it
		b, _ := json.Marshal(statusOf(err))
		send(errorEv, b)
		return
	}
	defer s.store.unwatch(wt)
	for _, o := range initial {
		if o.matches(req.namespace, ls, fs) && !send(added, encode(o)) {
			return
		}
	}
	if opts.watchList && !send(bookmark, bookmarkOf(req.res, listRV, true)) {
		return
	}
	deliver := func(e event) bool {
		now := e.obj.matches(req.namespace, ls, fs)
		was := e.old != nil && e.typ != added && e.old.matches(req.namespace, ls, fs)
		typ := e.typ
		switch {
		case e.typ == deleted && !was:
			return true
		case e.typ == deleted:
		case now && !was:
			typ = added
		case !now && was:
			typ = deleted
		case !now:
			return true
		}
		return send(typ, encode(e.obj))
	}
	for _, e := range replay {
		if !deliver(e) {
			return
		}
	}
	var bookmarks <-chan time.Time
	if opts.bookmarks {
		tk := time.NewTicker(s.cfg.BookmarkInterval)
		defer tk.Stop()
		bookmarks = tk.C
	}
	end := time.NewTimer(opts.timeout)
	defer end.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-closed:
			return
		case <-end.C:
			return
		case <-wt.gone:
			// Cut (it fell behind) or the server closed: what is
			// buffered is sent, then the client re-watches.
			for {
				select {
				case e := <-wt.ch:
					if !deliver(e) {
						return
					}
				default:
					return
				}
			}
		case e := <-wt.ch:
			if !deliver(e) {
				return
			}
		case <-bookmarks:
			// Every change up to the current version is in wt.ch (they
			// are queued under the store's lock), so with it empty the
			// bookmark promises nothing unsent.
			rv := s.store.current()
			if len(wt.ch) > 0 {
				continue
			}
			if !send(bookmark, bookmarkOf(req.res, rv, false)) {
				return
			}
		}
	}
}

// isWebSocket says the request asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
}

// bearerProtocolPrefix is the API server's WebSocket subprotocol carrying
// a bearer token (base64url, unpadded), for clients that cannot set
// headers: a browser's WebSocket.
const bearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

// wsHandshake accepts any Origin (the gateway let the request in by its
// bearer token, which a page elsewhere does not have; Headlamp's server
// forwards its own page's Origin) and never echoes the token's
// subprotocol back.
func wsHandshake(cfg *websocket.Config, r *http.Request) error {
	var keep []string
	for _, p := range cfg.Protocol {
		if !strings.HasPrefix(p, bearerProtocolPrefix) {
			keep = append(keep, p)
		}
	}
	if len(keep) > 0 {
		keep = keep[:1] // the server selects one, or none
	}
	cfg.Protocol = keep
	return nil
}

// hijacker gives x/net/websocket the connection through the gateway's
// wrapped ResponseWriter (http.ResponseController follows Unwrap).
type hijacker struct{ http.ResponseWriter }

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}
