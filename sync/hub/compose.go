// Package hub wires podhub's fleet side over one fleet database: the
// link to the devices over MQTT (devicelink), the scheduling controllers
// (controllers) and the API (api). The embedded broker (broker) is
// started apart: the hub may use an external one.
package hub

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"log/slog"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/controllers"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/logstream"
	"github.com/podvisor/podvisor/sync/hub/objectlink"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/hub/updates"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Config is how the hub reaches the broker and signs, how long a device
// may be silent and its clock. Its Changed is the scheduler's (New sets it).
type Config = devicelink.Config

// Hub is the device link and the scheduler over one fleet: the link's
// reports ask the scheduler for a pass, the scheduler's passes publish
// through the link.
type Hub struct {
	*devicelink.Link
	*controllers.Scheduler
	fleet     *fleetdb.Fleet
	workloads *workloaddb.Store
	objects   *objectdb.Store
	// Updates drives the fleet's self-updates and firmware rollouts.
	Updates *updates.Driver
	// ObjectLink gives devices the ConfigMaps and Secrets their pods
	// reference; tell it of an object's change (ObjectChanged).
	ObjectLink *objectlink.Link
	// Logs asks devices for pods' logs (podhub logs, pods/log).
	Logs *logstream.Streamer
	cfg  Config
	// stopSilence ends the watch of silent devices (Start starts it).
	stopSilence context.CancelFunc
	silenceDone chan struct{}
	// replica is this replica's part in the election (UseReplica), nil
	// for a hub alone.
	replica *replica.Elector
	log     *slog.Logger
}

// UseReplica makes the hub one replica of several on its store: the
// scheduling passes and the updates' passes run only while e says this
// replica leads, each pass's placements, orders and statuses fenced by
// its token, and they
// are asked for when it starts to lead. On PostgreSQL a pass asked for
// through a replica that does not lead (an apply, an eviction, a
// device's report it handled) is signalled to the leader through the
// change feed, which runs it (signalled), and the devices' reports are
// shared out: each replica handles those of the devices it owns
// (Elector.Owns). Call before Start and e.Start.
func (h *Hub) UseReplica(e *replica.Elector) {
	h.replica = e
	var schedule, update func()
	if h.fleet.Dialect() != sqldb.SQLite { // on SQLite one replica only: nothing to fence or signal
		h.workloads.SetFence(e.Fence)
		h.fleet.SetLeaderFence(e.Fence)
		feed := h.fleet.Changes()
		schedule = func() { feed.Signal(fleetwatch.SchedulePass) }
		update = func() { feed.Signal(fleetwatch.UpdatePass) }
		feed.OnSignal(h.signalled)
		// Presence is forgotten when the whole hub starts, not when a
		// replica joins others that keep it (it would mark the fleet
		// offline under them): decided before the join, atomically
		// with the others' joins, so that replicas starting together
		// never forget what one of them already stored.
		e.BeforeJoin(func() error {
			forgot, err := h.fleet.ForgetPresenceAlone(e.ID())
			if forgot {
				h.log.Info("no other live replica: every device is offline until its presence says again")
			}
			return err
		})
		// Each device's reports are handled by the replica that owns its
		// bucket (replica.Bucket), the others drop them; a gain has the
		// link take the gained devices up.
		h.Link.SetOwners(e)
		h.ObjectLink.SetOwner(e.Owns)
		e.WatchOwners(h.Link.OwnersChanged)
	}
	h.Scheduler.SetGate(e.Leading, schedule)
	h.Updates.SetGate(e.Leading, update)
	e.Watch(func(leading bool) {
		if leading {
			h.Scheduler.Reschedule()
			h.Updates.Kick()
		}
	})
}

// signalled answers the signals of the other replicas: the passes they
// ask for, run here if this replica leads (one that does not ignores
// them: asked again, it would signal them back), and what they stored
// that the object link keeps (a device's pods or index, the hub's
// objects), which it reads again.
func (h *Hub) signalled(device string, w fleetwatch.What) {
	if w&fleetwatch.Objects != 0 {
		if device == "" {
			h.ObjectLink.Reload()
		} else {
			h.ObjectLink.ReloadDevice(device)
		}
	}
	if !h.replica.Leading() {
		return
	}
	if w&fleetwatch.SchedulePass != 0 {
		h.Scheduler.Reschedule()
	}
	if w&fleetwatch.UpdatePass != 0 {
		h.Updates.Kick()
	}
}

// New makes a hub; Start starts it.
func New(cfg Config, fleet *fleetdb.Fleet, log *slog.Logger) *Hub {
	fleet.SetLog(log) // the change feed's lost and regained connections (PostgreSQL)
	h := &Hub{fleet: fleet, workloads: workloaddb.New(fleet.SQL()), objects: objectdb.New(fleet.SQL()), cfg: cfg, log: log}
	cfg.Changed = func() { h.Scheduler.Reschedule() }
	cfg.UpdateChanged = func() { h.Updates.Kick() }
	// The devices are given the hub's objects (tests may give others),
	// their indexes computed again as applies and deletes change them.
	if cfg.ObjectSource == nil {
		cfg.ObjectSource = h.objects
	}
	h.ObjectLink = objectlink.New(objectlink.Config{Topics: protocol.Topics{Prefix: cfg.Prefix}, Key: cfg.Key,
		Source: cfg.ObjectSource, Limits: cfg.ObjectLimits, Now: cfg.Now},
		fleet, func(topic string, retained bool, payload []byte) { h.Link.Publish(topic, retained, payload) }, log)
	h.objects.OnChange(h.ObjectLink.ObjectsChanged)
	if fleet.Dialect() != sqldb.SQLite {
		// The other replicas' links compute their devices' indexes again
		// too (reading what is stored first): one that stored a desired
		// document at the same time may have missed the object.
		h.objects.OnChange(func([]objects.Ref) { fleet.Changes().Signal(fleetwatch.Objects) })
	}
	cfg.Objects = h.ObjectLink
	h.Logs = logstream.New(logstream.Config{Fleet: fleet, Key: cfg.Key, Topics: protocol.Topics{Prefix: cfg.Prefix},
		Publish:       func(topic string, retained bool, payload []byte) { h.Link.Publish(topic, retained, payload) },
		DeviceTimeout: cfg.DeviceTimeout, Now: cfg.Now, Log: log})
	cfg.Logs = h.Logs
	h.Link = devicelink.New(cfg, fleet, log)
	h.Updates = updates.NewDriver(fleet, h.Link, log, cfg.Now, cfg.DeviceTimeout)
	h.Scheduler = controllers.New(controllers.Config{DeviceTimeout: cfg.DeviceTimeout, Now: cfg.Now},
		fleet, h.workloads, h.Link, log)
	return h
}

// Start starts the scheduling loop and connects to the broker, waiting
// at most wait for the first connection (it keeps trying in the
// background). Every device is offline until its presence says again
// (unless other replicas were running). The silence watch runs on every
// replica: it only tells this replica's readers, writing nothing.
func (h *Hub) Start(wait time.Duration) error {
	// Presence is forgotten when the hub starts; on PostgreSQL the
	// replica decided it before it joined (UseReplica), on SQLite it
	// runs alone (a second replica is refused).
	if h.replica == nil || h.fleet.Dialect() == sqldb.SQLite {
		if err := h.fleet.ForgetPresence(); err != nil {
			return err
		}
	}
	if err := h.ObjectLink.Start(); err != nil {
		return err
	}
	h.Scheduler.Start()
	h.Updates.Start()
	// A device that goes silent writes nothing: the fleet's readers are
	// told when it passes the timeout unheard from.
	ctx, cancel := context.WithCancel(context.Background())
	h.stopSilence = cancel
	h.silenceDone = make(chan struct{})
	go func() {
		defer close(h.silenceDone)
		h.fleet.Changes().WatchSilence(ctx, cmp.Or(h.cfg.DeviceTimeout, fleetdb.DefaultDeviceTimeout))
	}()
	return h.Link.Connect(wait)
}

// StopLeading stops the leader's work, the scheduling and updates'
// loops, waiting for a pass they run: before the replica hands the
// leader lease over, so that the next leader's passes never run beside
// this one's. Close calls it too.
func (h *Hub) StopLeading() {
	h.Scheduler.Close()
	h.Updates.Close()
}

// Close disconnects and stops the scheduling loop.
func (h *Hub) Close() {
	h.Link.Close()
	h.ObjectLink.Close()
	h.StopLeading()
	if h.stopSilence != nil {
		h.stopSilence()
		<-h.silenceDone
	}
}

// Workloads is the scheduler's tables of the hub's fleet.
func (h *Hub) Workloads() *workloaddb.Store { return h.workloads }

// Objects is the ConfigMaps and Secrets applied at the hub: what the
// distribution of objects to devices reads (Get, List, Entries) and
// listens to (OnChange). Secrets need its keys (SetKeys) before an apply.
func (h *Hub) Objects() *objectdb.Store { return h.objects }

// API is the hub's API, a device silent for timeout being NotReady.
func (h *Hub) API(timeout time.Duration) *api.API {
	var pub ed25519.PublicKey
	if h.cfg.Key != nil {
		pub = h.cfg.Key.Public().(ed25519.PublicKey)
	}
	return &api.API{Link: h.Link, Scheduler: h.Scheduler, Fleet: h.fleet, Workloads: h.workloads, Objects: h.objects, Timeout: timeout,
		HubKey: pub, Releases: releases.Store{Dir: h.cfg.ReleaseDir}, Updates: h.Updates, Logs: h.Logs}
}
