package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// Client talks to a daemon's socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

func (c *Client) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	return c.do(ctx, http.MethodGet, path, q, nil)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	u := "http://podvisor" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("no podvisor daemon is listening on %s (is it running? use --socket)", c.socket)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e apiError
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	resp, err := c.get(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// Pods lists every pod.
func (c *Client) Pods(ctx context.Context) (*v1.PodList, error) {
	var l v1.PodList
	return &l, c.getJSON(ctx, "/v1/pods", nil, &l)
}

// WatchPods returns the pod list once its version is newer than since.
func (c *Client) WatchPods(ctx context.Context, since uint64) (*v1.PodList, error) {
	var l v1.PodList
	return &l, c.getJSON(ctx, "/v1/pods", url.Values{"watch": {strconv.FormatUint(since, 10)}}, &l)
}

// Pod returns one pod.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	var p v1.Pod
	return &p, c.getJSON(ctx, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name), nil, &p)
}

// Events returns a pod's recent events.
func (c *Client) Events(ctx context.Context, namespace, name string) ([]Event, error) {
	var ev []Event
	return ev, c.getJSON(ctx, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/events", nil, &ev)
}

// Log streams a container's log to out.
func (c *Client) Log(ctx context.Context, namespace, name, container string, previous, follow bool, out io.Writer) error {
	q := url.Values{}
	if container != "" {
		q.Set("container", container)
	}
	if previous {
		q.Set("previous", "1")
	}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.get(ctx, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/log", q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(out, resp.Body)
	return err
}

// Version returns the daemon's version.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v Version
	return v, c.getJSON(ctx, "/v1/version", nil, &v)
}

// Delete terminates a pod; grace (seconds) may be nil.
func (c *Client) Delete(ctx context.Context, namespace, name string, grace *int64, force bool) (DeleteResult, error) {
	q := url.Values{}
	if grace != nil {
		q.Set("gracePeriod", strconv.FormatInt(*grace, 10))
	}
	if force {
		q.Set("force", "1")
	}
	var res DeleteResult
	resp, err := c.do(ctx, http.MethodDelete, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name), q, nil)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// SetCondition sets a readiness-gate condition of a pod.
func (c *Client) SetCondition(ctx context.Context, namespace, name, typ string, status bool) error {
	body := `{"status":"False"}`
	if status {
		body = `{"status":"True"}`
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/conditions/"+url.PathEscape(typ), nil, strings.NewReader(body))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Node describes the device.
func (c *Client) Node(ctx context.Context) (*v1.Node, error) {
	var n v1.Node
	return &n, c.getJSON(ctx, "/v1/node", nil, &n)
}

// Stats reads every running pod's usage.
func (c *Client) Stats(ctx context.Context) ([]PodStats, error) {
	var st []PodStats
	return st, c.getJSON(ctx, "/v1/stats", nil, &st)
}

// Drain stops every pod by priority bucket; it returns when none runs.
func (c *Client) Drain(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/node/drain", nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Uncordon admits pods again after a drain.
func (c *Client) Uncordon(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/node/uncordon", nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
