package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/dashboard"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/gateway"
	"github.com/podvisor/podvisor/sync/hub/hubmetrics"
	"github.com/podvisor/podvisor/sync/hub/kubeapi"
	"github.com/podvisor/podvisor/sync/pki"
)

// httpConfig is podhub.yaml's http: section, the HTTPS listener of the
// dashboard, /metrics and the Kubernetes API. Off unless listen is set.
type httpConfig struct {
	// Listen is HOST:PORT (--http-listen). Empty: no listener.
	Listen string `json:"listen,omitempty"`
	// CertFile and KeyFile are the operator's server certificate; without
	// them podhub's CA issues pki/http.crt for localhost, the loopback
	// addresses, this host's name and Names.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// Names are more host names or addresses for the issued certificate.
	Names []string `json:"names,omitempty"`
}

// check validates the section.
func (h httpConfig) check() error {
	if h.Listen != "" {
		if _, _, err := net.SplitHostPort(h.Listen); err != nil {
			return fmt.Errorf("http.listen %q: want HOST:PORT: %w", h.Listen, err)
		}
	}
	if (h.CertFile == "") != (h.KeyFile == "") {
		return errors.New("http.certFile and http.keyFile: give both or neither")
	}
	for _, n := range h.Names {
		if n == "" || strings.ContainsAny(n, " ,/") {
			return fmt.Errorf("http.names: %q is not a host name or address", n)
		}
	}
	return nil
}

// serverCert is the listener's certificate: the operator's, or one of
// podhub's CA, issued (again) when missing, ending or not naming every
// name it should.
func (c *cli) serverCert(h httpConfig, log *slog.Logger) (tls.Certificate, error) {
	if h.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(h.CertFile, h.KeyFile)
		if err != nil {
			return pair, fmt.Errorf("http.certFile/keyFile: %w", err)
		}
		return pair, nil
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return tls.Certificate{}, err
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	if host, err := os.Hostname(); err == nil && host != "" {
		names = append(names, host)
	}
	if host, _, err := net.SplitHostPort(h.Listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			names = append(names, host)
		}
	}
	names = append(names, h.Names...)
	certPath, keyPath := filepath.Join(c.pkiDir(), pki.HTTPCert), filepath.Join(c.pkiDir(), pki.HTTPKey)
	issued, err := ca.EnsureServer(certPath, keyPath, "podhub https", names)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the HTTPS listener's certificate: %w", err)
	}
	if issued {
		log.Info("issued the HTTPS listener's certificate", "file", certPath, "names", names)
	}
	return tls.LoadX509KeyPair(certPath, keyPath)
}

// startGateway opens the HTTPS listener when http.listen is set (nil
// otherwise) with what it serves: /metrics, the dashboard and the
// Kubernetes API. The caller serves it, closes it, then calls done (which
// ends the API's watches of the fleet).
func (c *cli) startGateway(cfg config, fleet *fleetdb.Fleet, h *hub.Hub, counters *hubmetrics.Counters, deviceTimeout time.Duration, ready func() []gateway.Check, log *slog.Logger) (gw *gateway.Server, done func(), err error) {
	if cfg.HTTP.Listen == "" {
		return nil, func() {}, nil
	}
	cert, err := c.serverCert(cfg.HTTP, log)
	if err != nil {
		return nil, nil, err
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return nil, nil, err
	}
	kube := kubeapi.New(kubeapi.Config{Fleet: fleet, Workloads: h.Workloads(), Timeout: deviceTimeout,
		Logs: h.Logs, Version: version, Log: log})
	gw, err = gateway.New(gateway.Config{
		Listen: cfg.HTTP.Listen, Cert: cert, CA: ca.Certificate(), PKIDir: c.pkiDir(),
		TokenFile: c.path(tokenFile), Log: log,
		Metrics: hubmetrics.New(hubmetrics.Config{Fleet: fleet, Workloads: h.Workloads(), Timeout: deviceTimeout,
			Counters: counters, Version: version}),
		Dashboard: dashboard.New(dashboard.Config{Fleet: fleet, Workloads: h.Workloads(), Timeout: deviceTimeout,
			Pods: kube.Pods}),
		Kube:  kube,
		Ready: ready,
	})
	if err != nil {
		kube.Close()
		return nil, nil, err
	}
	log.Info("HTTPS listener (dashboard, /metrics, Kubernetes API; login required)", "address", gw.Addr().String())
	return gw, kube.Close, nil
}
