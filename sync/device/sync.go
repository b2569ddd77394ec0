package device

import (
	"encoding/json"
	"fmt"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// resendAfter is how long a sent batch may wait for the hub's receipt
// before everything unacknowledged is sent again.
const resendAfter = 30 * time.Second

// onDesired takes a desired document: verify, validate, check against
// the file pods, store durably, apply, then acknowledge. A document is
// applied whole (one ApplyHub call) or not at all; a stale generation is
// ignored; the generation in force is acknowledged again, unchanged.
func (a *Agent) onDesired(_ mqtt.Client, m mqtt.Message) {
	payload := m.Payload()
	if len(payload) == 0 {
		return // a cleared retained message
	}
	a.desiredMu.Lock()
	defer a.desiredMu.Unlock()
	a.mu.Lock()
	applied := a.applied
	a.mu.Unlock()
	d, err := protocol.OpenDesired(payload, a.cfg.DeviceID, a.cfg.HubKey, a.cfg.AllowUnsigned)
	if err != nil {
		a.log.Warn("refused a desired document", "topic", m.Topic(), "err", err)
		a.publishAck(&protocol.Ack{ObservedGeneration: applied, Error: err.Error()})
		return
	}
	switch {
	case d.Generation < applied:
		a.log.Info("ignored a stale desired document", "generation", d.Generation, "applied", applied)
		a.publishAck(&protocol.Ack{Generation: d.Generation, ObservedGeneration: applied,
			Error: fmt.Sprintf("stale generation %d: generation %d is applied", d.Generation, applied)})
		return
	case d.Generation == applied:
		rec, _, err := a.store.Desired()
		if err == nil {
			a.publishAck(&protocol.Ack{Generation: applied, ObservedGeneration: applied, Pods: rec.Results})
		}
		return
	}
	pods, results := protocol.DecodePods(d)
	conflicts, err := a.pods.Conflicts(pods)
	if err != nil {
		// The daemon is busy: try the same document again shortly.
		a.log.Warn("checking hub pods; retrying", "generation", d.Generation, "err", err)
		time.AfterFunc(2*time.Second, func() { a.onDesired(nil, m) })
		return
	}
	for i := range results {
		r := &results[i]
		if reason, ok := conflicts[r.Namespace+"/"+r.Name]; ok && r.Accepted {
			r.Accepted, r.Reason = false, fmt.Sprintf("pods[%d]: %s", r.Index, reason)
		}
	}
	if err := a.store.SaveDesired(store.DesiredRecord{Generation: d.Generation, Document: payload, Results: results}); err != nil {
		// Not acknowledged: the retained document comes again at the
		// next connection.
		a.log.Error("storing a desired document", "generation", d.Generation, "err", err)
		return
	}
	a.applyAccepted(d.Generation, pods, results)
	a.log.Info("applied desired state from the hub", "generation", d.Generation, "pods", len(pods))
	a.publishAck(&protocol.Ack{Generation: d.Generation, ObservedGeneration: d.Generation, Pods: results})
}

// onStatusAck forgets what the hub has stored and lets more out.
func (a *Agent) onStatusAck(_ mqtt.Client, m mqtt.Message) {
	ack, err := protocol.DecodeStatusAck(m.Payload())
	if err != nil {
		a.log.Warn("bad status receipt from the hub", "topic", m.Topic(), "err", err)
		return
	}
	if ack.Epoch != a.store.Epoch() {
		return // a receipt for an outbox this device no longer has
	}
	a.mu.Lock()
	if ack.Resend {
		// The hub missed a batch: send again from what it has.
		a.sent, a.inflight, a.progress = max(ack.Seq, a.acked), 0, time.Now()
	}
	if ack.Seq <= a.acked {
		a.mu.Unlock()
		a.kick()
		return
	}
	a.acked = ack.Seq
	a.progress = time.Now()
	a.mu.Unlock()
	if err := a.store.Ack(ack.Seq); err != nil {
		a.log.Error("forgetting acknowledged statuses", "err", err)
	}
	a.kick()
}

// onHubPresence rewinds the outbox when the hub (re)connects: what was
// sent while it was away may have been dropped by the broker.
func (a *Agent) onHubPresence(_ mqtt.Client, m mqtt.Message) {
	p, err := protocol.DecodePresence(m.Payload())
	if err != nil || !p.Online {
		return
	}
	a.mu.Lock()
	a.sent, a.inflight, a.progress = a.acked, 0, time.Now()
	a.mu.Unlock()
	a.kick()
}

// drain sends the outbox in order while connected, at most Window items
// ahead of the hub's receipts.
func (a *Agent) drain(stop <-chan struct{}) {
	tick := time.NewTicker(resendAfter / 3)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-a.sendWake:
		case <-tick.C:
			a.mu.Lock()
			if a.sent > a.acked && time.Since(a.progress) > resendAfter {
				a.log.Warn("no receipt from the hub; sending the unacknowledged statuses again", "acked", a.acked, "sent", a.sent)
				a.sent, a.inflight = a.acked, 0
				a.progress = time.Now()
			}
			a.mu.Unlock()
		}
		for a.sendBatch() {
		}
	}
}

// sendBatch publishes the next batch if the window allows; false when
// there is nothing (more) to send now.
func (a *Agent) sendBatch() bool {
	a.mu.Lock()
	if !a.connected {
		a.mu.Unlock()
		return false
	}
	if a.sent <= a.acked {
		a.inflight = 0
	}
	room := a.cfg.Window - a.inflight
	after := a.sent
	a.mu.Unlock()
	if room <= 0 {
		return false
	}
	rows, err := a.store.Next(after, min(room, protocol.MaxBatch))
	if err != nil {
		a.log.Error("reading the outbox", "err", err)
		return false
	}
	if len(rows) == 0 {
		return false
	}
	payload, err := a.encodeBatch(after, rows)
	if err != nil {
		a.log.Error("encoding a status batch", "err", err)
		return false
	}
	tok := a.client.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindStatus), 1, false, payload)
	if tok.WaitTimeout(10*time.Second) && tok.Error() != nil {
		a.log.Warn("publishing statuses", "err", tok.Error())
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sent != after {
		return true // a reconnect reset the window meanwhile
	}
	if a.inflight == 0 {
		a.progress = time.Now()
	}
	a.sent, a.inflight = rows[len(rows)-1].Seq, a.inflight+len(rows)
	return true
}

func (a *Agent) encodeBatch(after int64, rows []store.Row) ([]byte, error) {
	items := make([]marshalItem, len(rows))
	for i, r := range rows {
		items[i] = marshalItem{Seq: r.Seq, Key: r.Key}
		switch {
		case r.Kind == store.KindEvent:
			items[i].Event = r.Payload
		case len(r.Payload) > 0:
			items[i].Pod = r.Payload
		}
	}
	return json.Marshal(struct {
		Schema int           `json:"schema"`
		Device string        `json:"device"`
		Epoch  string        `json:"epoch"`
		After  int64         `json:"after"`
		Items  []marshalItem `json:"items"`
	}{protocol.Schema, a.cfg.DeviceID, a.store.Epoch(), after, items})
}

// heartbeats publishes the node status at each connection and then
// every Heartbeat period while connected.
func (a *Agent) heartbeats(stop <-chan struct{}) {
	tick := time.NewTicker(a.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-a.beat:
		}
		a.mu.Lock()
		up := a.connected
		a.mu.Unlock()
		if !up {
			continue
		}
		node, err := a.pods.Node()
		if err != nil {
			a.log.Warn("node status for the heartbeat", "err", err)
			continue
		}
		hb := &protocol.Heartbeat{Device: a.cfg.DeviceID, Time: time.Now(), Version: a.cfg.Version, Labels: a.cfg.Labels, Node: node.Status}
		a.client.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindHeartbeat), 1, false, protocol.Encode(hb))
	}
}
