package main

import (
	"context"
	"log/slog"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/sync/uplink"
)

// serveMetrics opens the metrics listener when metrics.listen is set and
// serves it until ctx ends (the loop's exit). Nothing is served without
// it: the series name the device's pods.
func serveMetrics(ctx context.Context, mc config.Metrics, rec *devmetrics.Recorder, node devmetrics.NodeReader,
	hub *uplink.Agent, log *slog.Logger) error {
	network, address := mc.MetricsAddress()
	if network == "" {
		return nil
	}
	var token []byte
	if mc.BearerTokenFile != "" {
		t, err := devmetrics.ReadToken(mc.BearerTokenFile)
		if err != nil {
			return err
		}
		token = t
	}
	opts := devmetrics.Options{Version: version, Node: node}
	if hub != nil {
		opts.Uplink = hub.MetricsState
	}
	ln, err := devmetrics.Listen(network, address)
	if err != nil {
		return err
	}
	h := devmetrics.NewHandler(devmetrics.NewCollector(rec, opts), token, log)
	go func() {
		if err := devmetrics.Serve(ctx, ln, h); err != nil {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("metrics listening", "address", mc.Listen, "token", token != nil)
	return nil
}
