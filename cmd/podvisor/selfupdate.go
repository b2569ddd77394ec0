package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/firmware"
	"github.com/podvisor/podvisor/firmware/agent"
	_ "github.com/podvisor/podvisor/firmware/rauc"     // firmware.driver: rauc
	_ "github.com/podvisor/podvisor/firmware/swupdate" // firmware.driver: swupdate
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/uplink"
)

// errRelaunch ends runDaemon for a restart into another version: the
// command executes the launcher once everything is closed.
var errRelaunch = errors.New("restarting into another version")

// launch is the self-update's launcher, the first thing `podvisor run`
// does once it knows its data directory: it executes the current slot's
// podvisor in this process (counting a trial's starts, rolling a failed
// one back, each logged) or returns to run on as this binary. args are
// run's own.
func launch(conf *config.Config, args []string, log *slog.Logger) error {
	_, err := agent.Run(conf.DataDir, append([]string{"run"}, args...), log)
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
// The hub connection (sync/uplink; nil without a hub) is the updater's
// Transport and hands it the verified orders (through an orderRelay); its
// first heartbeat receipt is the gate's HubReached. Without a hub the
// updater reports to the log, and its gate does not wait for one.
func startUpdater(ctx context.Context, conf *config.Config, d *supervisor.Daemon, hub *uplink.Agent, restart func(), log *slog.Logger) (*agent.Updater, error) {
	key, err := releaseKey(conf)
	if err != nil {
		return nil, err
	}
	hubKeyID := "" // the hub the orders come from, as sync/uplink names it
	if conf.Hub.Key != "" {
		data, err := os.ReadFile(conf.Hub.Key)
		if err != nil {
			return nil, conf.FieldError("hub.key", err)
		}
		pub, err := protocol.ParsePublicKey(data)
		if err != nil {
			return nil, conf.FieldError("hub.key", fmt.Errorf("%s: %w", conf.Hub.Key, err))
		}
		hubKeyID = protocol.KeyID(pub)
	}
	device := conf.Hub.DeviceID
	if device == "" {
		device = conf.NodeName
	}
	drv, err := firmwareDriver(conf)
	if err != nil {
		return nil, err
	}
	backend := d.API()
	opts := agent.Options{DataDir: conf.DataDir, Device: device, Version: version, ReleaseKey: key, HubKeyID: hubKeyID,
		Containers: func() []agent.Container { return runningContainers(backend) }, Restart: restart,
		CommitTimeout: conf.Update.CommitTimeout.Duration, Log: log.With("component", "update"),
		OnReport: func(s protocol.UpdateState) { d.SetNodeAnnotation(agent.NodeAnnotation, agent.Describe(s)) }}
	if drv != nil {
		opts.Driver = installer{drv}
		opts.Reboot = rebootCommand(conf.Firmware, log)
	}
	signals := agent.GateSignals{Ready: d.Ready()}
	if hub != nil {
		opts.Transport = hub
		signals.HubReached = hub.HubReached()
	}
	u := agent.New(opts)
	u.Start(ctx, signals)
	if drv != nil {
		go confirmFirmware(ctx, drv, d.Ready(), conf.Firmware.CommitDeadline.Duration, u, log.With("component", "firmware"))
	}
	return u, nil
}

// firmwareDriver is the OS-update tool firmware.driver names (nil: none,
// firmware orders are refused).
func firmwareDriver(conf *config.Config) (firmware.Driver, error) {
	d, err := firmware.Open(firmware.Config{Driver: conf.Firmware.Driver, StateDir: conf.FirmwareStateDir(),
		RAUCBus: conf.Firmware.RAUC.Bus, SWUpdateControl: conf.Firmware.SWUpdate.ControlSocket,
		SWUpdateProgress: conf.Firmware.SWUpdate.ProgressSocket, SWUpdateSelect: conf.Firmware.SWUpdate.Select})
	if errors.Is(err, firmware.ErrNoDriver) {
		return nil, nil
	}
	if err != nil {
		return nil, conf.FieldError("firmware.driver", err)
	}
	return d, nil
}

// installer is a firmware driver as the updater uses it.
type installer struct{ d firmware.Driver }

func (i installer) Install(ctx context.Context, bundle string, progress func(percent int, msg string)) error {
	return i.d.Install(ctx, bundle, func(p firmware.Progress) { progress(p.Percent, p.Message) })
}

// confirmFirmware is the health gate after every start (firmware.Confirm):
// a freshly installed system is kept once the daemon is ready within the
// commit deadline, else marked bad; the verdict goes to the firmware
// order that rebooted the device.
func confirmFirmware(ctx context.Context, drv firmware.Driver, ready <-chan struct{}, deadline time.Duration, u *agent.Updater, log *slog.Logger) {
	healthy := func(ctx context.Context) error {
		select {
		case <-ready:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	res, err := firmware.Confirm(ctx, drv, healthy, deadline, firmware.RealClock)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("firmware health gate", "err", err)
		}
		return
	}
	running := res.State.Version
	if running == "" {
		running = res.State.Slot
	}
	switch res.Verdict {
	case firmware.Committed:
		u.FirmwareSettled(true, running, "")
	case firmware.Rejected, firmware.FellBack:
		log.Warn("firmware not committed", "verdict", res.Verdict, "reason", res.Reason)
		u.FirmwareSettled(false, running, res.Reason)
	}
}

// runningContainers are the containers running now, as the API shows
// them (what a restart must find again, unrestarted), and those that
// ended, with the reason recorded.
func runningContainers(b api.Backend) []agent.Container {
	pods, _, _ := b.Pods()
	return containersOf(pods)
}

func containersOf(pods []*v1.Pod) []agent.Container {
	var out []agent.Container
	for _, p := range pods {
		for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, cs := range list {
				c := agent.Container{PodUID: string(p.UID), Pod: p.Namespace + "/" + p.Name, Name: cs.Name}
				// An ended instance, now or before the current one: the
				// commit gate tells a container that ended by itself
				// from one whose state was lost.
				for _, t := range []*v1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
					if t != nil && t.ContainerID != "" {
						e := c
						e.ID, e.StartedAt, e.Ended = t.ContainerID, t.StartedAt.Time, cmp.Or(t.Reason, "Error")
						out = append(out, e)
					}
				}
				if cs.State.Running == nil || cs.ContainerID == "" {
					continue
				}
				c.ID, c.StartedAt = cs.ContainerID, cs.State.Running.StartedAt.Time
				out = append(out, c)
			}
		}
	}
	return out
}

// orderRelay hands the hub's update orders to the updater, which starts
// after the hub's agent (it needs it as its transport): the newest order
// received before then waits for it.
type orderRelay struct {
	mu      sync.Mutex
	ctx     context.Context
	u       *agent.Updater
	pending *protocol.Order
}

func (r *orderRelay) take(o *protocol.Order) {
	r.mu.Lock()
	u, ctx := r.u, r.ctx
	if u == nil {
		r.pending = o
	}
	r.mu.Unlock()
	if u != nil {
		u.Order(ctx, o)
	}
}

func (r *orderRelay) attach(ctx context.Context, u *agent.Updater) {
	r.mu.Lock()
	r.ctx, r.u = ctx, u
	o := r.pending
	r.pending = nil
	r.mu.Unlock()
	if o != nil {
		u.Order(ctx, o)
	}
}

// rebootCommand is how the device boots an installed bundle
// (firmware.reboot, firmware.rebootCommand): nil when its owner does. A
// reboot is an ordinary shutdown: the pods stop by priority (logind's
// delay lock, or SIGPWR/SIGTERM without systemd) before the new system
// starts.
func rebootCommand(f config.Firmware, log *slog.Logger) func() error {
	if f.Reboot == config.FirmwareRebootNever {
		return nil
	}
	argv := f.RebootCommand
	if len(argv) == 0 {
		argv = []string{"/sbin/reboot"}
		if _, err := os.Stat("/run/systemd/system"); err == nil {
			argv = []string{"systemctl", "reboot"}
		}
	}
	return func() error {
		log.Info("rebooting into the installed bundle", "command", argv)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
}
