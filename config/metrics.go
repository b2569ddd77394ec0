package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// MetricsUnixPrefix starts a metrics.listen that is a unix socket path.
const MetricsUnixPrefix = "unix:"

// MetricsAddress is metrics.listen split for net.Listen: "unix" and a
// path, or "tcp" and HOST:PORT; "" and "" when metrics are off.
func (m Metrics) MetricsAddress() (network, address string) {
	switch {
	case m.Listen == "":
		return "", ""
	case strings.HasPrefix(m.Listen, MetricsUnixPrefix):
		return "unix", strings.TrimPrefix(m.Listen, MetricsUnixPrefix)
	}
	return "tcp", m.Listen
}

// Loopback reports whether metrics.listen is reachable from this host
// only: a unix socket, or a TCP address on a loopback IP or localhost.
func (m Metrics) Loopback() bool {
	network, addr := m.MetricsAddress()
	if network != "tcp" {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (c *Config) validateMetrics(v *validation) {
	m := c.Metrics
	network, addr := m.MetricsAddress()
	switch network {
	case "":
		if m.BearerTokenFile != "" {
			v.add("metrics.bearerTokenFile", "is set but metrics.listen is empty (metrics are off)")
		}
		return
	case "unix":
		if !filepath.IsAbs(addr) {
			v.add("metrics.listen", "%q: a unix socket needs an absolute path (unix:/run/podvisor/metrics.sock)", m.Listen)
		}
	case "tcp":
		if err := checkHostPort(addr); err != nil {
			v.add("metrics.listen", "%q: %v", m.Listen, err)
			return
		}
		if !m.Loopback() && m.BearerTokenFile == "" {
			v.add("metrics.listen", "%q is not a loopback address: set metrics.bearerTokenFile, or listen on 127.0.0.1 or a unix socket", m.Listen)
		}
	}
	if f := m.BearerTokenFile; f != "" && !filepath.IsAbs(f) {
		v.add("metrics.bearerTokenFile", "%q must be an absolute path", f)
	}
}

// checkHostPort accepts HOST:PORT with a port from 1 to 65535 (HOST may
// be empty: every address).
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want HOST:PORT or unix:PATH: %v", err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
