package plugin

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A registry's CA in its host's directory is trusted for that host only;
// a host without a directory gets the system's roots; a directory with a
// file that is no certificate is an error naming it.
func TestRegistryClientTrustsPerHost(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	trusted, other := httptest.NewTLSServer(http.HandlerFunc(ok)), httptest.NewTLSServer(http.HandlerFunc(ok))
	defer trusted.Close()
	defer other.Close()
	host := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Host }

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, host(trusted)), 0o755)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: trusted.Certificate().Raw})
	os.WriteFile(filepath.Join(dir, host(trusted), "ca.crt"), ca, 0o644)
	client := registryClient(dir)
	resp, err := client.Get(trusted.URL + "/v2/")
	if err != nil {
		t.Fatalf("the host whose CA is given: %v", err)
	}
	resp.Body.Close()
	if _, err := client.Get(other.URL + "/v2/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("another host of the same certificate, without a directory: %v, want a certificate error", err)
	}

	os.WriteFile(filepath.Join(dir, host(trusted), "junk.crt"), []byte("not a certificate"), 0o644)
	if _, err := registryClient(dir).Get(trusted.URL + "/v2/"); err == nil || !strings.Contains(err.Error(), "junk.crt holds no PEM certificate") {
		t.Fatalf("a directory with junk: %v", err)
	}
	if cfg, err := hostTLS(dir, ".."); cfg != nil || err != nil {
		t.Fatalf("a host that names a parent directory: %v %v", cfg, err)
	}
}
