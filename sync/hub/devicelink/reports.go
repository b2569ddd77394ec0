package devicelink

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// device parses a report's topic, logging what is wrong with it.
func (h *Link) device(m mqtt.Message) (string, bool) {
	dev, _, err := h.topics.Parse(m.Topic())
	if err != nil {
		h.log.Warn("ignored a message", "err", err)
		return "", false
	}
	return dev, true
}

// reject counts a refused message. The first few of each minute are
// logged and recorded as the device's events (a device the fleet knows),
// so `podhub describe device` shows them; the rest are summed up in one
// line and one event, so a flood costs neither the log nor fleet.db.
func (h *Link) reject(dev string, m mqtt.Message, err error) {
	h.observeRefused(m)
	log, suppressed := h.refused.Note()
	if suppressed > 0 {
		h.log.Warn("refused more messages", "count", suppressed, "total", h.refused.Total())
		h.fleet.SaveRejection(dev, fmt.Sprintf("%d more messages refused across the fleet in the last minute (counted, not kept one by one)", suppressed), h.now())
	}
	if !log {
		return
	}
	h.log.Warn("refused a message", "device", dev, "topic", m.Topic(), "err", err)
	h.fleet.SaveRejection(dev, fmt.Sprintf("%s: %v", m.Topic(), err), h.now())
}

// refusal says whether a save failed on what the message claims (to be
// refused and counted) rather than on the database.
func refusal(err error) bool {
	return errors.Is(err, fleetdb.ErrUnknownDevice) || errors.Is(err, fleetdb.ErrNotPublished) || errors.Is(err, fleetdb.ErrNotOrdered) || errors.Is(err, errLabelsDropped)
}

var errLabelsDropped = errors.New("labels outside " + protocol.DeviceLabelPrefix + " dropped: a device sets only its own labels")

// saveAck records an ack, and resyncs a device that went back to an
// older generation (its state was reset, or an old document replayed).
// It happens once per regression: a forged ack cannot make the hub sign
// again until the device has acknowledged something newer.
func (h *Link) saveAck(dev string, a *protocol.Ack) error {
	regressed, err := h.fleet.SaveAck(a, h.now())
	if err == nil {
		h.cfg.Changed() // a terminating pod may be confirmed stopped
	}
	if err != nil || !regressed {
		return err
	}
	gen, err := h.Update(dev, func(current []json.RawMessage) []json.RawMessage { return current })
	if err != nil {
		return fmt.Errorf("resyncing: %w", err)
	}
	h.log.Warn("the device went back to an older generation; published its pods again, newer", "device", dev,
		"observed", a.ObservedGeneration, "generation", gen)
	return nil
}

// saveHeartbeat records a heartbeat and answers it with the device's
// receipt, so a device that hears nothing back knows its connection no
// longer delivers; labels a device may not set are dropped, and that
// refusal counted.
func (h *Link) saveHeartbeat(dev string, hb *protocol.Heartbeat) error {
	dropped, dup, err := h.fleet.SaveHeartbeat(hb, h.now())
	h.duplicate(dev, dup)
	if err == nil {
		h.observer().HeartbeatStored()
		// Only a heartbeat that changes what the scheduler reads asks for
		// a pass (a stale device is found by the scheduler's timer).
		if fp := schedFingerprint(hb); h.seenChanged(dev, fp) {
			h.cfg.Changed()
		}
		if old, ok := h.versions.Swap(dev, hb.Version); !ok || old != hb.Version {
			h.cfg.UpdateChanged()
		}
		epoch, seq, cerr := h.fleet.Cursor(dev)
		if cerr != nil {
			return cerr
		}
		// The receipt echoes the heartbeat's number: the device renews its
		// self-fencing leases from that heartbeat's send time.
		h.client.Publish(h.topics.Device(dev, protocol.KindStatusAck), 1, false, protocol.Encode(&protocol.StatusAck{Epoch: epoch, Seq: seq, Beat: hb.Beat}))
	}
	if err == nil && len(dropped) > 0 {
		err = fmt.Errorf("%w: %s", errLabelsDropped, strings.Join(dropped, ", "))
	}
	return err
}

// schedFingerprint is what the scheduler reads of a heartbeat: labels,
// allocatable, conditions' statuses, architecture and OS. (A device
// going silent or offline asks by itself: presence and the stale timer.)
func schedFingerprint(hb *protocol.Heartbeat) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(hb.Labels)) {
		fmt.Fprintf(&b, "%s=%s,", k, hb.Labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(hb.Node.Allocatable)) {
		q := hb.Node.Allocatable[k]
		fmt.Fprintf(&b, "%s:%s,", k, q.String())
	}
	for _, c := range hb.Node.Conditions {
		fmt.Fprintf(&b, "%s/%s,", c.Type, c.Status)
	}
	fmt.Fprintf(&b, "%s/%s", hb.Node.NodeInfo.Architecture, hb.Node.NodeInfo.OperatingSystem)
	return b.String()
}

// seenChanged records a device's scheduling fingerprint and says whether
// it changed (or is the first since the hub started).
// A heartbeat after a silence of over half the timeout asks too: the
// device may have been stale, and is Ready again.
func (h *Link) seenChanged(dev, fp string) bool {
	now := h.now()
	old, ok := h.seen.Swap(dev, seenHeartbeat{fp, now})
	if !ok {
		return true
	}
	prev := old.(seenHeartbeat)
	return prev.fingerprint != fp || now.Sub(prev.at) > h.cfg.DeviceTimeout/2
}

type seenHeartbeat struct {
	fingerprint string
	at          time.Time
}

// duplicate logs a device ID found shared by two installations.
func (h *Link) duplicate(dev string, found bool) {
	if found {
		h.log.Warn("two devices report under one device ID; shown DuplicateID", "device", dev)
	}
}

// report makes the handler of one kind of device report: the topic names
// the device, the payload must decode and name the same device; a refused
// one is recorded, an accepted one saved. Empty payloads (a cleared
// retained message) are ignored.
func report[T any](h *Link, what string, decode func([]byte) (*T, error), deviceOf func(*T) string, save func(dev string, v *T) error) mqtt.MessageHandler {
	return func(_ mqtt.Client, m mqtt.Message) {
		dev, ok := h.device(m)
		if !ok || len(m.Payload()) == 0 {
			return
		}
		v, err := decode(m.Payload())
		if err == nil {
			if named := deviceOf(v); named != dev {
				err = fmt.Errorf("%s names device %q", what, named)
			}
		}
		if err != nil {
			h.reject(dev, m, err)
			return
		}
		if err := save(dev, v); refusal(err) {
			h.reject(dev, m, err)
		} else if err != nil {
			h.log.Error("storing a "+what, "device", dev, "err", err)
		}
	}
}

// saveStatus stores a batch and sends the device its receipt. A failure
// sends none: the device sends the batch again.
func (h *Link) saveStatus(dev string, b *protocol.StatusBatch) error {
	r, err := h.fleet.StoreStatus(b, h.now())
	if err != nil {
		return err
	}
	h.observer().StatusItemsStored(r.Applied)
	if r.HubPodsChanged {
		// A hub pod became Ready or not, failed, or went: the controllers
		// may decide otherwise (passes coalesce, at most one a second).
		h.cfg.Changed()
	}
	h.client.Publish(h.topics.Device(dev, protocol.KindStatusAck), 1, false, protocol.Encode(&protocol.StatusAck{Epoch: b.Epoch, Seq: r.Cursor, Resend: r.Gap}))
	return nil
}
