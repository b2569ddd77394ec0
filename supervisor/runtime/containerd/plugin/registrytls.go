package plugin

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/remotes/docker"
)

// registryClient is the HTTP client of one pull. Each registry host it
// reaches gets a TLS configuration of its own from certsDir/<host[:port]>:
// the CAs of its *.crt files trusted besides the system's, as Docker's
// certs.d (and containerd's host directories without a hosts.toml) read
// them. The files are read at each pull, so a new CA needs no restart.
// Client certificates (*.cert, *.key) are not read: loading their keys
// links the private-key parsers and signers, +192 KiB of plugin measured.
func registryClient(certsDir string) *http.Client {
	return &http.Client{Transport: &hostTransports{dir: certsDir, byHost: map[string]http.RoundTripper{}}}
}

// hostTransports picks a transport by the request's host: a CA given for
// one registry is trusted for that registry only.
type hostTransports struct {
	dir    string
	mu     sync.Mutex
	byHost map[string]http.RoundTripper
}

func (h *hostTransports) RoundTrip(req *http.Request) (*http.Response, error) {
	t, err := h.transport(req.URL.Host)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.RoundTrip(req)
}

func (h *hostTransports) transport(host string) (http.RoundTripper, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.byHost[host]; ok {
		return t, nil
	}
	cfg, err := hostTLS(h.dir, host)
	if err != nil {
		return nil, err
	}
	t := docker.DefaultHTTPTransport(cfg)
	h.byHost[host] = t
	return t, nil
}

// hostTLS reads a registry host's certificates; nil without a directory
// for it.
func hostTLS(dir, host string) (*tls.Config, error) {
	if dir == "" || host == "" || strings.ContainsAny(host, `/\`) || host == "." || host == ".." {
		return nil, nil
	}
	hostDir := filepath.Join(dir, host)
	entries, err := os.ReadDir(hostDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry certificates: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, e := range entries {
		path := filepath.Join(hostDir, e.Name())
		switch filepath.Ext(e.Name()) {
		case ".crt":
			if cfg.RootCAs == nil {
				if cfg.RootCAs, err = x509.SystemCertPool(); err != nil {
					cfg.RootCAs = x509.NewCertPool()
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("registry certificates: %w", err)
			}
			if !cfg.RootCAs.AppendCertsFromPEM(data) {
				return nil, fmt.Errorf("registry certificates: %s holds no PEM certificate", path)
			}
		}
	}
	return cfg, nil
}
