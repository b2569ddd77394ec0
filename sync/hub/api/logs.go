package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Logs reads pods' logs from their devices (logstream.Streamer): errors
// are the API server's StatusErrors, answered with their code.
type Logs interface {
	PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error
}

//	GET /v1/devices/{id}/pods/{namespace}/{name}/log?container=C&previous=true&follow=true
//	    &timestamps=true&tailLines=N&sinceSeconds=N&sinceTime=RFC3339&limitBytes=N
//
// streams the log as text; an error before the first byte is a JSON
// error with the StatusError's code.
func (a *API) logRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/devices/{id}/pods/{namespace}/{name}/log", func(w http.ResponseWriter, r *http.Request) {
		if a.Logs == nil {
			reply(w, nil, errors.New("this hub serves no logs"))
			return
		}
		opts, err := LogOptions(r.URL.Query())
		if err != nil {
			reply(w, nil, err)
			return
		}
		lw := &lazyWriter{w: w}
		err = a.Logs.PodLogs(r.Context(), r.PathValue("id"), r.PathValue("namespace"), r.PathValue("name"), opts, lw)
		if err == nil || lw.started {
			return // an error after the log began ends it; the reader sees it end
		}
		code := http.StatusInternalServerError
		var se apierrors.APIStatus
		if errors.As(err, &se) && se.Status().Code != 0 {
			code = int(se.Status().Code)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(apiError{Error: err.Error()})
	})
}

// lazyWriter sends the response's header with the first byte of the
// log, so an error before it can still have its own code.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		l.w.Header().Set("X-Content-Type-Options", "nosniff")
	}
	return l.w.Write(p)
}

// Flush sends what was written (a followed log line by line).
func (l *lazyWriter) Flush() {
	if f, ok := l.w.(http.Flusher); ok && l.started {
		f.Flush()
	}
}

// LogOptions reads PodLogOptions from a query with the API server's
// parameter names, refusing what does not parse.
func LogOptions(q url.Values) (*v1.PodLogOptions, error) {
	o := &v1.PodLogOptions{Container: q.Get("container")}
	for name, into := range map[string]*bool{"previous": &o.Previous, "follow": &o.Follow, "timestamps": &o.Timestamps} {
		if s := q.Get(name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not true or false", name, s)
			}
			*into = v
		}
	}
	for name, into := range map[string]**int64{"tailLines": &o.TailLines, "sinceSeconds": &o.SinceSeconds, "limitBytes": &o.LimitBytes} {
		if s := q.Get(name); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not an integer", name, s)
			}
			*into = &v
		}
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, fmt.Errorf("sinceTime: %q is not an RFC 3339 time", s)
		}
		o.SinceTime = &metav1.Time{Time: t}
	}
	return o, nil
}

// Log writes a pod's log on a device to out as opts say; with Follow it
// lasts until ctx ends.
func (c *Client) Log(ctx context.Context, device, namespace, name string, opts *v1.PodLogOptions, out io.Writer) error {
	q := url.Values{}
	if opts.Container != "" {
		q.Set("container", opts.Container)
	}
	for name, v := range map[string]bool{"previous": opts.Previous, "follow": opts.Follow, "timestamps": opts.Timestamps} {
		if v {
			q.Set(name, "true")
		}
	}
	for name, v := range map[string]*int64{"tailLines": opts.TailLines, "sinceSeconds": opts.SinceSeconds, "limitBytes": opts.LimitBytes} {
		if v != nil {
			q.Set(name, strconv.FormatInt(*v, 10))
		}
	}
	if opts.SinceTime != nil {
		q.Set("sinceTime", opts.SinceTime.UTC().Format(time.RFC3339))
	}
	u := "http://podhub/v1/devices/" + url.PathEscape(device) + "/pods/" + url.PathEscape(namespace) + "/" + url.PathEscape(name) + "/log?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := c.upload.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("podhub is not reachable (is podhub serve running with this --data-dir?): %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return decodeReply(resp, nil)
	}
	defer resp.Body.Close()
	_, err = io.Copy(out, resp.Body)
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a followed log quietly, as kubectl's does
	}
	return err
}
