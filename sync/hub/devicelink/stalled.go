package devicelink

import (
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Desired documents the broker never acknowledged. NATS 2.9 drops a
// QoS 1 message it cannot store while its cluster elects new leaders
// after a node's loss, and withholds its PUBACK; MQTT 3.1.1 sends it
// again only after a reconnection, which may never come to a hub whose
// own node lived. So each device's last desired publish is watched and,
// unacknowledged after stalledAfter while connected, published again.
const (
	stalledAfter = 30 * time.Second
	stalledCheck = 10 * time.Second
)

// pubWatch holds each device's last desired publish.
type pubWatch struct {
	mu sync.Mutex
	m  map[string]watchedPub
}

type watchedPub struct {
	tok mqtt.Token
	at  time.Time
}

// add watches a device's newest publish (it replaces the one before).
func (w *pubWatch) add(device string, tok mqtt.Token, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]watchedPub{}
	}
	w.m[device] = watchedPub{tok, at}
}

// stalled forgets the publishes that are over (acknowledged or failed:
// a failed one is published again at the next connection) and returns
// the devices whose publish is still unanswered after after.
func (w *pubWatch) stalled(now time.Time, after time.Duration) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for dev, p := range w.m {
		select {
		case <-p.tok.Done():
			delete(w.m, dev)
			continue
		default:
		}
		if now.Sub(p.at) >= after {
			out = append(out, dev)
		}
	}
	return out
}

// publishDesired publishes a device's desired document (retained, QoS
// 1) on c and watches it.
func (h *Link) publishDesired(c mqtt.Client, device string, doc []byte) {
	tok := c.Publish(h.topics.Device(device, protocol.KindDesired), 1, true, doc)
	h.watch.add(device, tok, h.now())
}

// watchPublishes publishes again, every stalledCheck, the stalled
// desired documents, until the link closes.
func (h *Link) watchPublishes() {
	tick := time.NewTicker(stalledCheck)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-tick.C:
			h.resendStalled()
		}
	}
}

// resendStalled publishes each stalled device's current desired
// document again (a newer one may have replaced the stalled one).
func (h *Link) resendStalled() {
	devices := h.watch.stalled(h.now(), stalledAfter)
	if len(devices) == 0 || !h.client.IsConnectionOpen() {
		return
	}
	h.log.Warn("the broker acknowledged no desired document for a while; publishing them again", "devices", len(devices), "after", stalledAfter)
	for _, dev := range devices {
		h.updating.Lock()
		d, err := h.fleet.Desired(dev)
		if err == nil && d.Generation > 0 {
			h.publishDesired(h.client, dev, d.Document)
		}
		h.updating.Unlock()
		if err != nil {
			h.log.Error("reading the desired document", "device", dev, "err", err)
		}
	}
}
