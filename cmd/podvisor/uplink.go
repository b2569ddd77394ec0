package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/tlsconfig"
	"github.com/podvisor/podvisor/sync/uplink"
)

// attachUplink connects the daemon to its hub when one is configured (call
// it before the daemon runs): the hub's agent attaches to the daemon's
// Assignments and keeps its tables in the daemon's state database. The
// returned function detaches it.
//
// The hub's update orders go to orders; the agent returned (nil without a
// hub) is the updater's transport.
//
// Every heartbeat carries summary's metrics (the hub needs them for
// devices it cannot scrape, whether or not the metrics listener is on).
//
// The hub's ConfigMaps and Secrets, bounded by objs and sealed for the key
// of hub.sealKey, go to sink: the getter hub pods read, before the daemon
// runs, and each change.
//
// The hub's logs requests are served from logs, as podvisor logs reads
// them (podLogs).
func attachUplink(hc config.Hub, objs config.Objects, nodeName, dataDir string, d supervisor.Assignments, sink hubObjectSink,
	orders func(*protocol.Order), logs api.Backend, summary func() devmetrics.Summary, log *slog.Logger) (*uplink.Agent, func(), error) {
	brokers := hc.Brokers()
	if len(brokers) == 0 {
		return nil, func() {}, nil
	}
	cfg := uplink.Config{Broker: brokers[0], Brokers: brokers[1:], DeviceID: hc.DeviceID, Prefix: hc.Prefix, AllowUnsigned: hc.AllowUnsigned,
		Username: hc.Username, Version: version, Labels: hc.Labels, OnUpdateOrder: orders, PodLogs: podLogs{logs}, MetricsSummary: summary}
	if cfg.DeviceID == "" {
		cfg.DeviceID = nodeName
	}
	if hc.Key != "" {
		pub, err := readHubKey(hc.Key)
		if err != nil {
			return nil, nil, err
		}
		cfg.HubKey = pub
	}
	if hc.PasswordFile != "" {
		pw, err := os.ReadFile(hc.PasswordFile)
		if err != nil {
			return nil, nil, fmt.Errorf("hub passwordFile: %w", err)
		}
		cfg.Password = strings.TrimSpace(string(pw))
	}
	cfg.Heartbeat = hc.Heartbeat.Duration
	key, err := loadSealKey(hc.SealKey, dataDir, log)
	if err != nil {
		return nil, nil, err
	}
	cfg.SealKey = key
	cfg.MaxObjects, cfg.MaxObjectBytes = objs.MaxObjects, objs.MaxBytes.Value()
	cfg.OnObjectsChanged = sink.HubObjectsChanged
	cfg.OnObjectsOverdue = sink.HubObjectsOverdue
	if strings.HasPrefix(cfg.Broker, "mqtts://") {
		t, err := tlsconfig.Client(hc.TLS.CA, hc.TLS.Cert, hc.TLS.Key, hc.TLS.ServerName)
		if err != nil {
			return nil, nil, err
		}
		cfg.TLS = t
	}
	limits := store.Limits{Rows: hc.Outbox.MaxRows, Bytes: hc.Outbox.MaxBytes.Value()}
	st, err := store.Open(filepath.Join(dataDir, "state.db"), limits)
	if err != nil {
		return nil, nil, err
	}
	a, stop, err := uplink.AttachAgent(cfg, st, d, log.With("component", "hub"))
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	sink.SetHubObjects(a.Objects())
	log.Info("hub configured", "url", strings.Join(brokers, ","), "device", cfg.DeviceID, "signed", cfg.HubKey != nil)
	return a, func() { stop(); st.Close() }, nil
}

// hubObjectSink is the daemon's side of the hub's objects
// (supervisor.Daemon).
type hubObjectSink interface {
	SetHubObjects(objects.Getter)
	HubObjectsChanged([]objects.Ref)
	HubObjectsOverdue([]objects.Ref)
}

// loadSealKey reads the device's sealing key: the enrolment bundle's
// (hub.sealKey), else <dataDir>/seal.key, made at the first start so a
// device enrolled before sealing keys existed gets one without a new
// enrolment (the hub trusts the first key it announces).
func loadSealKey(path, dataDir string, log *slog.Logger) (*seal.PrivateKey, error) {
	if path != "" {
		k, err := seal.LoadPrivateKey(path)
		if err != nil {
			return nil, fmt.Errorf("hub sealKey: %w", err)
		}
		return k, nil
	}
	path = filepath.Join(dataDir, "seal.key")
	k, created, err := seal.LoadOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("hub sealing key: %w", err)
	}
	if created {
		log.Info("made a sealing key for the hub's secrets", "file", path)
	}
	return k, nil
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

// podLogs serves the hub's logs requests from the daemon's local API
// backend, as podvisor logs reads them (api.OpenLog).
type podLogs struct{ b api.Backend }

func (p podLogs) OpenLog(namespace, pod string, o protocol.LogsOptions) (func(context.Context, io.Writer) error, error) {
	req := api.LogRequest{Container: o.Container, Previous: o.Previous, Follow: o.Follow,
		Options: crilog.Options{Timestamps: o.Timestamps, TailLines: -1}}
	if o.TailLines != nil {
		req.TailLines = *o.TailLines
	}
	if o.SinceTime != nil {
		req.Since = *o.SinceTime
	} else if o.SinceSeconds != nil {
		req.Since = time.Now().Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	copyLog, err := api.OpenLog(p.b, namespace, pod, req)
	var le *api.LogError
	if errors.As(err, &le) {
		reason := map[int]string{http.StatusNotFound: protocol.LogsNotFound, http.StatusBadRequest: protocol.LogsBadRequest}[le.Code]
		if reason == "" {
			reason = protocol.LogsInternalError
		}
		return nil, &protocol.LogsError{Reason: reason, Message: le.Message}
	}
	return copyLog, err
}
