package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// podhub serve --http-listen: the shipped binary's HTTPS listener takes
// a token made by podhub token create (directly and through its
// kubeconfig, with kubectl when there is one) and the dashboard's login,
// refuses a device's certificate, and refuses a deleted token at once.
func TestPodhubHTTPSListener(t *testing.T) {
	addr := freeLoopback(t)
	h := newPodhub(t, "--http-listen", addr)
	base := "https://" + addr
	kc := filepath.Join(t.TempDir(), "ci.kubeconfig")
	out, code := h.cli("token", "create", "ci", "--kubeconfig", kc, "--server", base)
	if code != 0 {
		t.Fatalf("podhub token create: %s", out)
	}
	token, _, _ := strings.Cut(out, "\n")

	caPEM, err := os.ReadFile(filepath.Join(h.dataDir, "pki", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 20 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	c := client()
	get := func(c *http.Client, path, bearer string) (int, string, *http.Response) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp
	}

	// The listener is open before the unix socket serve waits on.
	if code, body, _ := get(c, "/healthz", ""); code != 200 || body != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body, _ := get(c, "/api", ""); code != 401 || !strings.Contains(body, `"reason":"Unauthorized"`) {
		t.Errorf("/api without a login: %d %q", code, body)
	}
	if code, body, _ := get(c, "/api", token); code == 401 || code == 429 {
		t.Errorf("/api with the token: %d %q", code, body)
	}

	// /metrics: the hub's exposition, for the token only.
	if code, _, _ := get(c, "/metrics", ""); code != 401 {
		t.Errorf("/metrics without a login: %d, want 401", code)
	}
	if code, body, resp := get(c, "/metrics", token); code != 200 || !strings.Contains(body, "# TYPE podhub_devices gauge") ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("/metrics with the token: %d %s, want the hub's exposition", code, resp.Header.Get("Content-Type"))
	}

	// The dashboard's login form sets the session cookie.
	resp, err := c.PostForm(base+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cookies := resp.Cookies(); resp.StatusCode != 303 || len(cookies) != 1 || cookies[0].Name != "podhub_session" {
		t.Errorf("login: %d, cookies %v", resp.StatusCode, cookies)
	}

	// A device's certificate is no login.
	dir, _ := h.enrol(t, "gw-1")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "device.pem"), filepath.Join(dir, "device.key"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(client(pair), "/api", ""); code != 401 {
		t.Errorf("/api with a device's certificate: %d %q", code, body)
	}

	// The kubeconfig files work for kubectl (when the machine has one):
	// the CA, the token, a user's certificate; a revoked user is refused.
	userKC := filepath.Join(t.TempDir(), "alice.kubeconfig")
	if out, code := h.cli("user", "add", "alice", "--kubeconfig", userKC, "--server", base); code != 0 {
		t.Fatalf("podhub user add: %s", out)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		raw := func(kubeconfig, path string) string {
			out, _ := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "--raw", path).CombinedOutput()
			return string(out)
		}
		if out := raw(kc, "/healthz"); out != "ok" {
			t.Errorf("kubectl get --raw /healthz through the token's kubeconfig: %s", out)
		}
		for _, f := range []string{kc, userKC} {
			// In: the API's answer, or NotFound while no API is mounted.
			if out := raw(f, "/version"); strings.Contains(out, "Unauthorized") || strings.Contains(out, "certificate") {
				t.Errorf("kubectl --kubeconfig %s get --raw /version: %s", filepath.Base(f), out)
			}
		}
		if out, code := h.cli("user", "revoke", "alice"); code != 0 {
			t.Fatalf("podhub user revoke: %s", out)
		}
		if out := raw(userKC, "/version"); !strings.Contains(out, "Unauthorized") {
			t.Errorf("kubectl as the revoked user: %q, want Unauthorized", out)
		}
	}

	if out, code := h.cli("token", "delete", "ci"); code != 0 {
		t.Fatalf("podhub token delete: %s", out)
	}
	if code, _, _ := get(c, "/api", token); code != 401 {
		t.Errorf("/api with the deleted token: %d, want 401 without a restart", code)
	}
}
