package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/firmware/agent"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
)

// errRelaunch ends runDaemon for a restart into another version: the
// command executes the launcher once everything is closed.
var errRelaunch = errors.New("restarting into another version")

// launch is the self-update's launcher, the first thing `podvisor run`
// does once it knows its data directory: it executes the current slot's
// podvisor in this process (counting a trial's starts, rolling a failed
// one back) or returns to run on as this binary. args are run's own.
func launch(conf *config.Config, args []string) error {
	_, err := agent.Run(conf.DataDir, append([]string{"run"}, args...))
	return err
}

// relaunch executes the launcher again, with the same arguments, after
// the daemon ended for a restart.
func relaunch(args []string) error {
	return agent.Relaunch(append([]string{"run"}, args...))
}

// releaseKey is the key release manifests are checked with:
// update.releaseKey, else the hub's; nil without either.
func releaseKey(conf *config.Config) (ed25519.PublicKey, error) {
	path, field := conf.Update.ReleaseKey, "update.releaseKey"
	if path == "" {
		path, field = conf.Hub.Key, "hub.key"
	}
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, conf.FieldError(field, err)
	}
	key, err := protocol.ParsePublicKey(data)
	if err != nil {
		return nil, conf.FieldError(field, fmt.Errorf("%s: %w", path, err))
	}
	return key, nil
}

// startUpdater starts the self-update's side of the daemon: the report of
// a rollback that brought this version back, the commit gate of a version
// on trial, and the orders. restart ends the daemon for the launcher.
//
// The hub connection (sync/uplink) is the updater's Transport and hands
// it the verified orders (Updater.Order); its first heartbeat receipt is
// the gate's HubReached. Until they are joined, the updater has no
// transport: it reports to the log, and its gate does not wait for a hub.
func startUpdater(ctx context.Context, conf *config.Config, d *supervisor.Daemon, restart func(), log *slog.Logger) (*agent.Updater, error) {
	key, err := releaseKey(conf)
	if err != nil {
		return nil, err
	}
	device := conf.Hub.DeviceID
	if device == "" {
		device = conf.NodeName
	}
	backend := d.API()
	u := agent.New(agent.Options{DataDir: conf.DataDir, Device: device, Version: version, ReleaseKey: key,
		Containers: func() []agent.Container { return runningContainers(backend) }, Restart: restart,
		CommitTimeout: conf.Update.CommitTimeout.Duration, Log: log.With("component", "update")})
	u.Start(ctx, agent.GateSignals{Ready: d.Ready()})
	return u, nil
}

// runningContainers are the containers running now, as the API shows
// them: what a restart must find again, unrestarted.
func runningContainers(b api.Backend) []agent.Container {
	pods, _, _ := b.Pods()
	return containersOf(pods)
}

func containersOf(pods []*v1.Pod) []agent.Container {
	var out []agent.Container
	for _, p := range pods {
		for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, cs := range list {
				if cs.State.Running == nil || cs.ContainerID == "" {
					continue
				}
				out = append(out, agent.Container{PodUID: string(p.UID), Pod: p.Namespace + "/" + p.Name, Name: cs.Name,
					ID: cs.ContainerID, StartedAt: cs.State.Running.StartedAt.Time})
			}
		}
	}
	return out
}
