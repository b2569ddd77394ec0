package probes

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// serve starts an HTTP server on addr ("127.0.0.2:0" is another host
// than the probes' 127.0.0.1) and returns its port.
func serve(t *testing.T, addr string, h http.HandlerFunc) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().(*net.TCPAddr).Port
}

func get(port int, path string) *v1.HTTPGetAction {
	return &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}
}

// The kubelet (probe/http.RedirectChecker(false)) follows redirects to the
// same host only; a redirect elsewhere ends the probe with success and the
// warning "Probe terminated redirects", and nothing connects to that host.
func TestHTTPGetRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	other := serve(t, "127.0.0.2:0", func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	})
	var local int
	local = serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/to-ok":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/to-down":
			http.Redirect(w, r, "/down", http.StatusMovedPermanently)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/to-other":
			http.Redirect(w, r, "http://127.0.0.2:"+strconv.Itoa(other)+"/fail", http.StatusFound)
		case "/to-localhost":
			// Same machine, another host name: not followed either.
			http.Redirect(w, r, "http://localhost:"+strconv.Itoa(local)+"/down", http.StatusFound)
		}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		path, warning, err string
	}{
		{path: "/to-ok"},
		{path: "/to-down", err: "statuscode: 503"},
		{path: "/loop", err: "stopped after 10 redirects"},
		{path: "/to-other", warning: "Probe terminated redirects, Response body: <a href="},
		{path: "/to-localhost", warning: "Probe terminated redirects"},
	} {
		warning, err := httpGet(ctx, target, get(local, tc.path), time.Second)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.err)
		}
		if (warning == "") != (tc.warning == "") || !strings.HasPrefix(warning, tc.warning) {
			t.Errorf("%s: warning %q, want prefix %q", tc.path, warning, tc.warning)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the probe connected to the other host %d times", n)
	}
	// A hook's httpGet follows the same policy.
	hook := &v1.LifecycleHandler{HTTPGet: get(local, "/to-other")}
	if _, err := Hook(ctx, target, hook, time.Second); err != nil || elsewhere.Load() != 0 {
		t.Fatalf("hook redirected elsewhere: err %v, connections there %d", err, elsewhere.Load())
	}
}

// A probe redirected to another host succeeds, and the manager reports
// the kubelet's ProbeWarning text once, not at every period.
func TestManagerReportsRedirectWarningOnce(t *testing.T) {
	local := serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.2:1/", http.StatusFound)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx)
	m.TimeUnit = 10 * time.Millisecond
	c := &v1.Container{Name: "app", ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: get(local, "/")},
		PeriodSeconds: 1, TimeoutSeconds: 100, SuccessThreshold: 1, FailureThreshold: 1}}
	m.Start("inst", c, target)
	defer m.Stop("inst")
	r := next(t, m)
	if !r.OK || r.WarningOnly || r.Kind != lifecycle.Readiness ||
		!strings.HasPrefix(r.Warning, "Readiness probe warning: Probe terminated redirects, Response body: ") {
		t.Fatalf("first result %+v, want a Readiness success with the kubelet's warning", r)
	}
	select {
	case r := <-m.Results():
		t.Fatalf("a second report for an unchanged warning: %+v", r)
	case <-time.After(200 * time.Millisecond): // 20 more probe periods
	}
}
