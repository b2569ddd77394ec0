package uplink

import (
	"encoding/json"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/lease"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// onStatusAck forgets what the hub has stored and lets more out; the
// window decides what a receipt is worth.
func (a *Agent) onStatusAck(_ mqtt.Client, m mqtt.Message) {
	ack, err := protocol.DecodeStatusAck(m.Payload())
	if err != nil {
		a.refuseReceipt(m.Topic(), err)
		return
	}
	a.mu.Lock()
	a.heard = a.now()
	a.mu.Unlock()
	if ack.Beat != 0 && a.lease.answer(ack.Beat) {
		a.beatAnswered()
	}
	if ack.Epoch != a.store.Epoch() {
		return // a receipt for an outbox this device no longer has
	}
	a.mu.Lock()
	v := a.win.receipt(ack.Seq, ack.Resend, a.now())
	caughtUp := a.win.acked >= a.win.assigned // everything sent is stored
	a.mu.Unlock()
	if v.refused != nil {
		a.refuseReceipt(m.Topic(), v.refused)
	}
	if v.newEpoch {
		a.newEpoch("the hub has lost what it stored of this outbox")
		return
	}
	if v.forget > 0 {
		if err := a.store.Ack(v.forget); err != nil {
			a.log.Error("forgetting acknowledged statuses", "err", err)
		}
		if caughtUp {
			a.outboxState() // the outbox may be empty: its age starts again (one query per burst, not per receipt)
		}
	}
	if v.refused == nil {
		a.kick()
	}
}

// refuseReceipt counts a status receipt not believed, logging throttled.
func (a *Agent) refuseReceipt(topic string, err error) {
	log, suppressed := a.refusedAcks.Note()
	if suppressed > 0 {
		a.log.Warn("refused more status receipts", "topic", topic, "count", suppressed, "total", a.refusedAcks.Total())
	}
	if log {
		a.log.Warn("refused a status receipt", "topic", topic, "err", err)
	}
}

// newEpoch restarts the outbox's sequence: everything kept, every pod's
// newest status included, is sent again from 1 under a new epoch, which
// the hub takes only from the start.
func (a *Agent) newEpoch(why string) {
	epoch, err := a.store.NewEpoch()
	if err != nil {
		a.log.Error("starting a new outbox epoch", "err", err)
		return
	}
	a.mu.Lock()
	a.win.newEpoch(a.now())
	a.mu.Unlock()
	a.log.Warn("sending every status again under a new outbox epoch", "why", why, "epoch", epoch)
	a.kick()
}

// onHubPresence rewinds the outbox when the hub (re)connects: what was
// sent while it was away may have been dropped by the broker. A session
// announced while this device is connected (not the retained presence a
// connection gets, which its own heartbeat at connect answers) is also
// answered with a heartbeat, soon and jittered: a replica that gained
// this device announces one and has no heartbeat of it yet.
func (a *Agent) onHubPresence(_ mqtt.Client, m mqtt.Message) {
	p, err := protocol.DecodePresence(m.Payload())
	if err != nil {
		return
	}
	a.mu.Lock()
	a.hubOnline, a.heard = p.Online, a.now()
	if !p.Online {
		a.mu.Unlock()
		return
	}
	a.win.rewind(a.now())
	a.mu.Unlock()
	a.kick()
	if !m.Retained() {
		a.sessBeat.announced(func() { poke(a.beat) })
	}
}

// drain sends the outbox in order while connected, at most Window items
// ahead of the hub's receipts.
func (a *Agent) drain(stop <-chan struct{}) {
	tick := time.NewTicker(a.cfg.ResendAfter / 3)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-a.sendWake:
		case <-tick.C:
			a.mu.Lock()
			sent, acked := a.win.sent, a.win.acked
			v := a.win.tick(a.now())
			a.mu.Unlock()
			if v.resend {
				a.log.Warn("no receipt from the hub; sending the unacknowledged statuses again", "acked", acked, "sent", sent)
			}
			if v.reconnect {
				a.log.Warn("still no receipt from the hub; reconnecting")
				poke(a.lost)
			}
			if n := a.refused.Flush(); n > 0 {
				a.log.Warn("refused more desired documents", "count", n, "total", a.refused.Total())
			}
			if n := a.refusedAcks.Flush(); n > 0 {
				a.log.Warn("refused more status receipts", "count", n, "total", a.refusedAcks.Total())
			}
			if n := a.refusedOrders.Flush(); n > 0 {
				a.log.Warn("refused more update orders", "count", n, "total", a.refusedOrders.Total())
			}
			if n := a.refusedChunks.Flush(); n > 0 {
				a.log.Warn("refused more chunks", "count", n, "total", a.refusedChunks.Total())
			}
			if v.newEpoch {
				a.newEpoch("the hub's receipts name sequence numbers this outbox never sent")
			}
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
	after, room := a.win.next()
	epoch := a.store.Epoch()
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
	from := after
	if rows[0].Seq > after+1 {
		// A receipt came in meanwhile and its rows are gone (only
		// acknowledged rows leave a hole: unsent ones have no number):
		// the batch follows the last of them, as the hub requires.
		after = rows[0].Seq - 1
	}
	// Numbered now: the receipt may come before the publish returns.
	a.mu.Lock()
	if epoch == a.store.Epoch() {
		a.win.numbered(rows[len(rows)-1].Seq)
	}
	a.mu.Unlock()
	payload, err := a.encodeBatch(epoch, after, rows)
	if err != nil {
		a.log.Error("encoding a status batch", "err", err)
		return false
	}
	tok := a.current().Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindStatus), 1, false, payload)
	if tok.WaitTimeout(10*time.Second) && tok.Error() != nil {
		a.log.Warn("publishing statuses", "err", tok.Error())
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if epoch == a.store.Epoch() {
		// Not counted when a reconnect or a new epoch reset the window
		// meanwhile.
		a.win.published(from, rows[len(rows)-1].Seq, len(rows), a.now())
	}
	return true
}

func (a *Agent) encodeBatch(epoch string, after int64, rows []store.Row) ([]byte, error) {
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
	}{protocol.Schema, a.cfg.DeviceID, epoch, after, items})
}

// heartbeats publishes the node status at each connection and then
// every Heartbeat period while connected.
func (a *Agent) heartbeats(stop <-chan struct{}) {
	tick := time.NewTimer(a.lease.period(a.cfg.Heartbeat))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-a.beat:
		}
		// Shorter while a pod has a self-fencing lease (leaseLink.period).
		tick.Reset(a.lease.period(a.cfg.Heartbeat))
		a.mu.Lock()
		up := a.connected
		// The hub answers each heartbeat with a receipt. Silence for
		// three periods while the hub is online means this client no
		// longer hears the broker (a broker can drop a client whose
		// session was just taken over, leaving its connection up).
		deaf := up && a.hubOnline && a.now().Sub(a.heard) > 3*a.cfg.Heartbeat
		if deaf {
			a.heard = a.now()
		}
		a.mu.Unlock()
		if deaf {
			a.log.Warn("nothing heard from the hub for three heartbeats; reconnecting", "heartbeat", a.cfg.Heartbeat)
			poke(a.lost)
			continue
		}
		if !up {
			continue
		}
		node, err := a.pods.Node()
		if err != nil {
			a.log.Warn("node status for the heartbeat", "err", err)
			continue
		}
		hb := &protocol.Heartbeat{Device: a.cfg.DeviceID, Time: a.now(), Version: a.cfg.Version, Labels: a.cfg.Labels, Node: node.Status, Instance: a.cfg.Instance,
			Net: a.netSummary(), Metrics: a.metricsSnapshot()}
		// Numbered and timed last, on the lease clock (not the agent's
		// settable one): the lease renews from this instant.
		hb.Beat = a.lease.beat(lease.Now())
		a.current().Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindHeartbeat), 1, false, protocol.Encode(hb))
	}
}
