package conformance

// The https hook tests above pass against a server that answers 200 over
// TLS. The kubelet's handler runner (pkg/kubelet/lifecycle/handlers.go,
// runHTTPHandler, with its insecure client) also decides these cases,
// checked here on probes.Hook against real servers: the response's status
// is not looked at, the certificate is not verified, and an https hook
// that a plain HTTP server answers is sent again over http.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/probes"
)

// hookServer counts the requests for /echo that reach it.
type hookServer struct {
	*httptest.Server
	hits atomic.Int32
}

func newHookServer(t *testing.T, tls bool, status int) *hookServer {
	s := &hookServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echo" {
			s.hits.Add(1)
		}
		w.WriteHeader(status)
	})
	if tls {
		s.Server = httptest.NewTLSServer(h) // a certificate nobody trusts
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *hookServer) port(t *testing.T) int {
	u, _ := url.Parse(s.URL)
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runHTTPHook returns the hook's LifecycleHTTPFallback warning text, if
// any, and its error.
func runHTTPHook(port int, scheme v1.URIScheme) (string, error) {
	h := &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/echo?msg=poststart", Port: intstr.FromInt32(int32(port)), Scheme: scheme}}
	return probes.Hook(context.Background(), probes.Target{Host: "127.0.0.1"}, h, 10*time.Second)
}

func TestHTTPHookLikeTheKubeletsHandlerRunner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tls      bool
		status   int
		scheme   v1.URIScheme
		fallback bool // the kubelet records LifecycleHTTPFallback
	}{
		{"https to a self-signed certificate: not verified", true, http.StatusOK, v1.URISchemeHTTPS, false},
		{"an error status is still an answer (http)", false, http.StatusInternalServerError, v1.URISchemeHTTP, false},
		{"an error status is still an answer (https)", true, http.StatusNotFound, v1.URISchemeHTTPS, false},
		{"https answered in plain HTTP: sent again over http", false, http.StatusOK, v1.URISchemeHTTPS, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHookServer(t, tc.tls, tc.status)
			warning, err := runHTTPHook(s.port(t), tc.scheme)
			if err != nil {
				t.Fatalf("the hook failed, the kubelet's succeeds: %v", err)
			}
			want := ""
			if tc.fallback {
				want = "request to HTTPS lifecycle hook 127.0.0.1:" + strconv.Itoa(s.port(t)) + " got HTTP response, retry with HTTP succeeded"
			}
			if warning != want {
				t.Fatalf("LifecycleHTTPFallback text %q, want %q", warning, want)
			}
			if n := s.hits.Load(); n != 1 {
				t.Fatalf("the hook's request reached the server %d times, want once", n)
			}
		})
	}

	t.Run("nothing listening: the hook fails", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, err := runHTTPHook(port, v1.URISchemeHTTP); err == nil {
			t.Fatal("a hook to a closed port succeeded")
		}
	})
	t.Run("http to a TLS server: the hook gets a 400 answer, as the kubelet's", func(t *testing.T) {
		s := newHookServer(t, true, http.StatusOK)
		if _, err := runHTTPHook(s.port(t), v1.URISchemeHTTP); err != nil {
			t.Fatalf("the hook failed, the kubelet's succeeds (Go's TLS server answers 400): %v", err)
		}
		if n := s.hits.Load(); n != 0 {
			t.Fatalf("a plain request reached the TLS server's handler %d times", n)
		}
	})
}
