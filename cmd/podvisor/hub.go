package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/podsecurity"
	"github.com/podvisor/podvisor/sync/device"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/tlsconfig"
)

// hubConfig is the config file's hub section.
type hubConfig struct {
	URL           string            `json:"url,omitempty"`
	DeviceID      string            `json:"deviceId,omitempty"`
	Key           string            `json:"key,omitempty"`
	AllowUnsigned bool              `json:"allowUnsigned,omitempty"`
	Prefix        string            `json:"prefix,omitempty"`
	Username      string            `json:"username,omitempty"`
	PasswordFile  string            `json:"passwordFile,omitempty"`
	Heartbeat     *metav1.Duration  `json:"heartbeat,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	TLS           struct {
		CA         string `json:"ca,omitempty"`
		Cert       string `json:"cert,omitempty"`
		Key        string `json:"key,omitempty"`
		ServerName string `json:"serverName,omitempty"`
	} `json:"tls"`
	Outbox struct {
		MaxRows  int                `json:"maxRows,omitempty"`
		MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	} `json:"outbox"`
	// What the hub may run here (the device's own manifests are trusted).
	PodSecurity          string `json:"podSecurity,omitempty"`
	PodSecurityVersion   string `json:"podSecurityVersion,omitempty"`
	AllowProcessPods     bool   `json:"allowProcessPods,omitempty"`
	AllowRootProcessPods bool   `json:"allowRootProcessPods,omitempty"`
	Images               struct {
		Registries    []string `json:"registries,omitempty"`
		RequireDigest bool     `json:"requireDigest,omitempty"`
	} `json:"images"`
}

// hubPodPolicy checks the hub section's settings and returns the policy
// for hub pods. Settings that cannot go together are refused here, before
// anything starts.
func hubPodPolicy(hc hubConfig) (*podsecurity.Policy, error) {
	if hc.AllowUnsigned && hc.Key != "" {
		// Either would decide alone: an unsigned document would pass, and
		// its generation would make the real hub's documents look stale.
		return nil, fmt.Errorf("config hub.allowUnsigned: true cannot be combined with hub.key (or --hub-key) %s: "+
			"documents signed with that key would not be required; remove one of them", hc.Key)
	}
	p, err := podsecurity.New(podsecurity.Config{Level: hc.PodSecurity, Version: hc.PodSecurityVersion,
		AllowProcessPods: hc.AllowProcessPods, AllowRootProcessPods: hc.AllowRootProcessPods, DefaultUID: int64(os.Geteuid()),
		Images: podsecurity.ImageConfig{Registries: hc.Images.Registries, RequireDigest: hc.Images.RequireDigest}})
	var field *podsecurity.ConfigError
	if errors.As(err, &field) {
		return nil, fmt.Errorf("config hub.%w", err)
	} else if err != nil {
		return nil, err
	}
	return p, nil
}

// attachHub connects the daemon to its hub when one is configured (call
// it before the daemon runs): the hub's agent attaches to the daemon's
// HubSide and keeps its tables in the daemon's state database. The
// returned function detaches it.
func attachHub(hc hubConfig, nodeName, dataDir string, d supervisor.HubSide, log *slog.Logger) (func(), error) {
	if hc.URL == "" {
		return func() {}, nil
	}
	cfg := device.Config{Broker: hc.URL, DeviceID: hc.DeviceID, Prefix: hc.Prefix, AllowUnsigned: hc.AllowUnsigned,
		Username: hc.Username, Version: version, Labels: hc.Labels}
	if !strings.HasPrefix(cfg.Broker, "mqtt://") && !strings.HasPrefix(cfg.Broker, "mqtts://") {
		return nil, fmt.Errorf("hub url %q: want mqtt://HOST:PORT or mqtts://HOST:PORT", cfg.Broker)
	}
	if cfg.DeviceID == "" {
		cfg.DeviceID = nodeName
	}
	if hc.Key != "" {
		pub, err := readHubKey(hc.Key)
		if err != nil {
			return nil, err
		}
		cfg.HubKey = pub
	}
	if hc.PasswordFile != "" {
		pw, err := os.ReadFile(hc.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("hub passwordFile: %w", err)
		}
		cfg.Password = strings.TrimSpace(string(pw))
	}
	if hc.Heartbeat != nil {
		cfg.Heartbeat = hc.Heartbeat.Duration
	}
	if strings.HasPrefix(cfg.Broker, "mqtts://") {
		t, err := tlsconfig.Client(hc.TLS.CA, hc.TLS.Cert, hc.TLS.Key, hc.TLS.ServerName)
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	limits := store.DefaultLimits
	if hc.Outbox.MaxRows > 0 {
		limits.Rows = hc.Outbox.MaxRows
	}
	if q := hc.Outbox.MaxBytes; q != nil {
		limits.Bytes = q.Value()
	}
	st, err := store.Open(filepath.Join(dataDir, "state.db"), limits)
	if err != nil {
		return nil, err
	}
	stop, err := device.Attach(cfg, st, d, log.With("component", "hub"))
	if err != nil {
		st.Close()
		return nil, err
	}
	log.Info("hub configured", "url", cfg.Broker, "device", cfg.DeviceID, "signed", cfg.HubKey != nil)
	return func() { stop(); st.Close() }, nil
}

// readHubKey reads the hub's ed25519 public key, hub.pub from podhub init.
func readHubKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hub key: %w", err)
	}
	pub, err := protocol.ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("hub key %s: %w", path, err)
	}
	return pub, nil
}
