package uplink

import (
	"fmt"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// onDesired runs on paho's reader, one message at a time: it checks a
// document's signature and generation and keeps it as the one pending,
// superseding an older pending one (a flood supersedes, never queues),
// for applyDesired to store and apply. A refusal is counted, logged
// throttled, and answered with an ack only as often as it is logged.
func (a *Agent) onDesired(_ mqtt.Client, m mqtt.Message) {
	payload := m.Payload()
	if len(payload) == 0 {
		return // a cleared retained message
	}
	d, err := protocol.OpenDesired(payload, a.cfg.DeviceID, a.cfg.HubKey, a.cfg.AllowUnsigned)
	a.mu.Lock()
	applied, floor := a.applied, a.floor
	if err == nil && d.Generation < applied {
		err = fmt.Errorf("stale generation %d: generation %d is applied", d.Generation, applied)
	} else if err == nil && d.Generation < floor {
		err = fmt.Errorf("stale generation %d: generation %d was applied from this hub before (%s beside state.db)", d.Generation, floor, generationFile)
	}
	if err == nil && (a.pending == nil || a.pending.doc.Generation <= d.Generation) {
		a.pending = &pendingDoc{payload: payload, doc: d, conn: a.lease.current()}
	}
	a.mu.Unlock()
	if err != nil {
		gen := int64(0)
		if d != nil {
			gen = d.Generation
		}
		a.refuse(m.Topic(), gen, applied, err)
		return
	}
	poke(a.desiredWake)
}

// refuse counts a refused desired document; the first few of each minute
// are logged and acknowledged with the reason, the rest summed up.
func (a *Agent) refuse(topic string, gen, applied int64, err error) {
	log, suppressed := a.refused.Note()
	if suppressed > 0 {
		a.log.Warn("refused more desired documents", "topic", topic, "count", suppressed, "total", a.refused.Total())
	}
	if !log {
		return
	}
	a.log.Warn("refused a desired document", "topic", topic, "err", err)
	a.publishAck(&protocol.Ack{Generation: gen, ObservedGeneration: applied, Error: err.Error()})
}

// applyDesired takes the pending document whenever there is one.
func (a *Agent) applyDesired(stop <-chan struct{}) {
	var retry <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case <-a.desiredWake:
		case <-retry:
			retry = nil
		}
		a.mu.Lock()
		p := a.pending
		a.pending = nil
		a.mu.Unlock()
		if p == nil {
			continue
		}
		if !a.take(p) {
			// The daemon is busy: try the same document again shortly,
			// unless a newer one arrives first.
			a.mu.Lock()
			if a.pending == nil {
				a.pending = p
			}
			a.mu.Unlock()
			retry = time.After(2 * time.Second)
		}
	}
}

// take validates a checked document against the file pods, stores it
// durably, applies it, then acknowledges it. A document is applied whole
// (one ApplyAssigned call) or not at all; a stale generation is ignored; the
// generation in force is acknowledged again, unchanged. false asks for a
// retry.
func (a *Agent) take(p *pendingDoc) bool {
	d := p.doc
	a.mu.Lock()
	applied := a.applied
	a.mu.Unlock()
	switch {
	case d.Generation < applied:
		a.log.Info("ignored a stale desired document", "generation", d.Generation, "applied", applied)
		a.publishAck(&protocol.Ack{Generation: d.Generation, ObservedGeneration: applied,
			Error: fmt.Sprintf("stale generation %d: generation %d is applied", d.Generation, applied)})
		return true
	case d.Generation == applied:
		rec, _, err := a.store.Desired()
		if err == nil {
			a.publishAck(&protocol.Ack{Generation: applied, ObservedGeneration: applied, Pods: rec.Results})
		}
		a.docTaken(p) // the hub's current document is the one in force
		return true
	}
	pods, results := protocol.DecodePods(d, manifest.Decode)
	conflicts, err := a.pods.Conflicts(pods)
	if err != nil {
		a.log.Warn("checking hub pods; retrying", "generation", d.Generation, "err", err)
		return false
	}
	for i := range results {
		r := &results[i]
		if reason, ok := conflicts[r.Namespace+"/"+r.Name]; ok && r.Accepted {
			r.Accepted, r.Reason = false, fmt.Sprintf("pods[%d]: %s", r.Index, reason)
		}
	}
	if err := a.store.SaveDesired(store.DesiredRecord{Generation: d.Generation, Document: p.payload, Results: results}); err != nil {
		// Not acknowledged: the retained document comes again at the
		// next connection.
		a.log.Error("storing a desired document", "generation", d.Generation, "err", err)
		return true
	}
	if err := saveFloor(a.store.Dir(), a.keyID, d.Generation); err != nil {
		a.log.Error("recording the newest generation outside state.db", "generation", d.Generation, "err", err)
	}
	a.mu.Lock()
	a.floor = max(a.floor, d.Generation)
	a.mu.Unlock()
	a.applyAccepted(d, pods, results)
	a.docTaken(p)
	a.log.Info("applied desired state from the hub", "generation", d.Generation, "pods", len(pods))
	a.publishAck(&protocol.Ack{Generation: d.Generation, ObservedGeneration: d.Generation, Pods: results})
	return true
}
