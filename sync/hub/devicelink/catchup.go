package devicelink

import (
	"strconv"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// presenceHandler saves devices' presence and, for a device that has
// just connected (a presence sent now, not a retained one replayed to
// the hub's new subscription), catches it up.
func (h *Link) presenceHandler() mqtt.MessageHandler {
	// Set by save for the message being handled: paho hands the hub's
	// messages over one at a time (SetOrderMatters).
	var cameOnline string
	save := report(h, "presence", protocol.DecodePresence, func(p *protocol.Presence) string { return p.Device },
		func(dev string, p *protocol.Presence) error {
			dup, err := h.fleet.SavePresence(dev, p, h.now())
			h.duplicate(dev, dup)
			h.cfg.Changed()
			h.cfg.UpdateChanged()
			if err == nil && p.Online && !dup {
				cameOnline = dev
			}
			return err
		})
	return func(c mqtt.Client, m mqtt.Message) {
		cameOnline = ""
		save(c, m)
		if cameOnline != "" && !m.Retained() {
			h.catchUp(cameOnline)
		}
	}
}

// catchUp publishes a device's desired document again when the device
// comes online without having answered it. A clustered broker may have
// lost both copies the device would get it from: NATS 2.9 drops a
// retained message, and a QoS 1 message for a session, that it cannot
// store while its JetStream cluster elects new leaders after a node's
// loss (a few seconds), logging it and nothing more (docs/brokers.md).
// The device ignores a generation it has, so an answer still on its way
// costs one message. A device is caught up with one document at most
// once per stalledAfter (catchUpGate): each presence of a device that withholds its ack would
// otherwise have the hub publish up to 1 MiB again, on the one goroutine
// that handles every device's messages.
func (h *Link) catchUp(device string) {
	ack, err := h.fleet.LastAck(device)
	if err != nil {
		h.log.Error("reading the last ack", "device", device, "err", err)
		return
	}
	// Under the update lock: an update stored meanwhile is published
	// after this one, never under it.
	h.updating.Lock()
	defer h.updating.Unlock()
	d, err := h.fleet.Desired(device)
	if err != nil {
		h.log.Error("reading the desired document", "device", device, "err", err)
		return
	}
	if d.Generation == 0 || ack != nil && ack.Generation >= d.Generation {
		return
	}
	// Only a publish counts, once per document: a device that answered
	// comes online as often as it likes, and a newer document is caught
	// up at once.
	if !h.catchUps.allow(device+"@"+strconv.FormatInt(d.Generation, 10), h.now(), stalledAfter) {
		h.log.Debug("a device came online again without answering its desired document; caught up a moment ago", "device", device)
		return
	}
	answered := int64(0)
	if ack != nil {
		answered = ack.Generation
	}
	h.log.Info("a device came online without answering its desired document; publishing it again",
		"device", device, "generation", d.Generation, "answered", answered)
	h.publishDesired(h.client, device, d.Document)
}

// maxCatchUps bounds the devices catchUpGate remembers: past it, the
// oldest is forgotten (it may then catch up again early, which costs one
// message, not memory).
const maxCatchUps = 4096

// catchUpGate lets each key (a device's document: device@generation)
// through at most once per period. The zero value is ready.
type catchUpGate struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// allow says whether device may catch up at now, and if so counts it as
// caught up at now.
func (g *catchUpGate) allow(device string, now time.Time, period time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if at, ok := g.last[device]; ok && now.Sub(at) < period && !now.Before(at) {
		return false
	}
	if g.last == nil {
		g.last = map[string]time.Time{}
	}
	if _, ok := g.last[device]; !ok && len(g.last) >= maxCatchUps {
		g.forget(now, period)
	}
	g.last[device] = now
	return true
}

// forget drops the devices whose period is over, or else the one caught
// up longest ago.
func (g *catchUpGate) forget(now time.Time, period time.Duration) {
	oldest := ""
	for d, at := range g.last {
		if now.Sub(at) >= period || now.Before(at) {
			delete(g.last, d)
		} else if oldest == "" || at.Before(g.last[oldest]) {
			oldest = d
		}
	}
	if len(g.last) >= maxCatchUps {
		delete(g.last, oldest)
	}
}
