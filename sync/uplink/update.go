package uplink

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// The self-update side of the link: the hub's signed orders, handed to
// the daemon's updater (Config.OnUpdateOrder) newest first and once; the
// updater's reports (Report), retained on update-state; and the
// artifacts' transfer in chunks (Download, fetch.go).

// orderFile holds the newest order ID handed to the updater, with the
// hub key it came under ("<key id> <order id>"), beside state.db like
// the generation floor: a restart does not hand out an older order again.
const orderFile = "hub-update-order"

// reportEvery is the least time between two progress reports of one
// phase; a phase change is reported at once.
const reportEvery = 500 * time.Millisecond

// orders is the agent's state of the update orders.
type orders struct {
	mu sync.Mutex
	// stored is the newest order ID handed out (kept in orderFile);
	// handed says it was handed out by this run. The retained order
	// whose ID is stored is handed out once more after a restart: the
	// updater must see it to finish or commit what it started (an
	// install that restarted the daemon), and it decides what is left
	// to do.
	stored  int64
	handed  bool
	pending *protocol.Order // checked, newer than stored, not yet handed out
	wake    chan struct{}
}

// reports is the newest UpdateState and its publication.
type reports struct {
	mu     sync.Mutex
	latest *protocol.UpdateState
	dirty  bool // latest not yet published
	gate   reportGate
	timer  *time.Timer
}

// reportGate rate-limits progress reports: a report is published at
// once when it is the first, changes the order or the phase, or ends the
// order; otherwise at most once per every (wait says how long until it
// may go). Pure, so it is tested on a fake clock.
type reportGate struct {
	every time.Duration
	last  time.Time
	order int64
	phase string
	any   bool
}

func (g *reportGate) wait(now time.Time, s *protocol.UpdateState) time.Duration {
	if !g.any || s.Order != g.order || s.Phase != g.phase || protocol.UpdateDone(s.Phase) {
		return 0
	}
	if d := g.last.Add(g.every).Sub(now); d > 0 {
		return d
	}
	return 0
}

func (g *reportGate) sent(now time.Time, s *protocol.UpdateState) {
	g.any, g.last, g.order, g.phase = true, now, s.Order, s.Phase
}

// HubReached is closed when the hub first answers a heartbeat of this
// run (a receipt naming one it sent): the hub is reachable both ways.
// The update's commit gate waits for it.
func (a *Agent) HubReached() <-chan struct{} { return a.hubReached }

// beatAnswered notes a receipt of one of this run's heartbeats.
func (a *Agent) beatAnswered() {
	a.reachedOnce.Do(func() { close(a.hubReached) })
}

// onUpdate runs on paho's reader: it checks an order and keeps it as the
// one to hand out if it is newer than any handed out or pending.
//
// An order must verify with the hub key even where AllowUnsigned lets
// unsigned desired documents in: an order replaces podvisor itself (or
// the operating system), and what it installs runs as root beyond the
// reach of the hub's next document; "a trusted broker" is a development
// convenience for pods, not a licence for anyone on it to replace the
// agent. protocol.OpenOrder refuses unsigned orders and a missing key.
func (a *Agent) onUpdate(_ mqtt.Client, m mqtt.Message) {
	payload := m.Payload()
	if len(payload) == 0 {
		return // a cleared retained order
	}
	o, err := protocol.OpenOrder(payload, a.cfg.DeviceID, a.cfg.HubKey)
	a.ord.mu.Lock()
	stored, handed, pending := a.ord.stored, a.ord.handed, a.ord.pending
	if err != nil {
		a.ord.mu.Unlock()
		a.refuseOrder(m.Topic(), payload, stored, err)
		return
	}
	newest := o.ID > stored || o.ID == stored && !handed
	seen := stored
	if pending != nil {
		newest = newest && o.ID > pending.ID
		seen = max(seen, pending.ID)
	}
	if newest {
		a.ord.pending = o
	}
	a.ord.mu.Unlock()
	switch {
	case newest:
		poke(a.ord.wake)
	case o.ID < seen:
		a.logRefusedOrder(m.Topic(), fmt.Errorf("order %d is older than order %d (the newest handed to the updater is kept in %s beside state.db)", o.ID, seen, orderFile))
	default:
		// The current order again (the retained one at a reconnect).
		a.log.Debug("update order already handed out", "order", o.ID)
	}
}

// refuseOrder logs a refused order (throttled) and, when it names this
// device with an ID newer than any handed out, reports it Failed with
// the reason, so the hub sees why. An older ID is not reported: its
// report would replace the current order's.
func (a *Agent) refuseOrder(topic string, payload []byte, stored int64, err error) {
	a.logRefusedOrder(topic, err)
	p := peekOrder(payload)
	if p.Device != a.cfg.DeviceID || p.ID < 1 || p.ID <= stored {
		return
	}
	a.Report(protocol.UpdateState{Order: p.ID, Kind: p.kind, Version: p.version, Phase: protocol.UpdateFailed,
		Reason: fmt.Sprintf("update order %d refused: %v", p.ID, err)})
}

// logRefusedOrder logs the first few refusals of each minute, and then
// how many more.
func (a *Agent) logRefusedOrder(topic string, err error) {
	log, suppressed := a.refusedOrders.Note()
	if suppressed > 0 {
		a.log.Warn("refused more update orders", "topic", topic, "count", suppressed, "total", a.refusedOrders.Total())
	}
	if log {
		a.log.Warn("refused an update order", "topic", topic, "err", err)
	}
}

// peeked is what an order that did not verify says of itself, for its
// Failed report only: nothing else is believed from it.
type peeked struct {
	Device        string          `json:"device"`
	ID            int64           `json:"id"`
	Release       json.RawMessage `json:"release"`
	kind, version string
}

func peekOrder(payload []byte) peeked {
	p := peeked{kind: protocol.ReleaseAgent}
	if len(payload) > protocol.MaxMessageBytes {
		return p
	}
	var env protocol.SignedDoc
	if json.Unmarshal(payload, &env) != nil || json.Unmarshal(env.Doc, &p) != nil {
		return peeked{kind: protocol.ReleaseAgent}
	}
	var rel protocol.SignedDoc
	var r struct{ Kind, Version string }
	if len(p.Release) > 0 && json.Unmarshal(p.Release, &rel) == nil && json.Unmarshal(rel.Doc, &r) == nil {
		if r.Kind == protocol.ReleaseFirmware {
			p.kind = r.Kind
		}
		if _, err := protocol.ParseVersion(r.Version); err == nil {
			p.version = r.Version
		}
	}
	return p
}

// handOrders hands the pending order to the updater, off paho's reader
// (the updater's downloads need the reader for their chunks). The order's
// ID is recorded first, so a restart does not hand out an older one.
func (a *Agent) handOrders(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-a.ord.wake:
		}
		a.ord.mu.Lock()
		o := a.ord.pending
		a.ord.pending = nil
		stored := a.ord.stored
		if o != nil {
			a.ord.stored, a.ord.handed = max(stored, o.ID), true
		}
		a.ord.mu.Unlock()
		if o == nil {
			continue
		}
		if o.ID > stored {
			if err := saveOrderID(a.store.Dir(), a.keyID, o.ID); err != nil {
				a.log.Error("recording the update order handed to the updater; a restart may hand an older one out again", "order", o.ID, "err", err)
			}
		}
		a.log.Info("update order from the hub", "order", o.ID, "withdraw", len(o.Release) == 0)
		a.cfg.OnUpdateOrder(o)
	}
}

// loadOrderID reads the newest order ID handed out under the hub key
// keyID; another key (another hub) has none.
func loadOrderID(dir, keyID string) (int64, error) {
	return loadKeyed(filepath.Join(dir, orderFile), keyID, "order id")
}

func saveOrderID(dir, keyID string, id int64) error {
	return writeAtomic(filepath.Join(dir, orderFile), fmt.Appendf(nil, "%s %d\n", keyID, id))
}

// Report publishes the updater's state of its newest order, retained on
// update-state (the newest wins; it is published again after every
// reconnect). Progress within a phase goes out at most twice a second, the
// last of a burst later; a new phase or order at once.
func (a *Agent) Report(s protocol.UpdateState) {
	s.Schema, s.Device = protocol.Schema, a.cfg.DeviceID
	if s.Time.IsZero() {
		s.Time = a.now()
	}
	s.Percent = min(max(s.Percent, 0), 100)
	s.Reason = clip(s.Reason, 1024)
	// Within the broker's limit however the reason encodes (JSON makes
	// <, > and & six bytes each): a report over it would get the device
	// disconnected at every connection, as it is sent again then.
	for len(protocol.Encode(&s)) > protocol.MaxUpdateStateBytes && s.Reason != "" {
		s.Reason = clip(s.Reason, len(s.Reason)/2)
	}
	a.rep.mu.Lock()
	defer a.rep.mu.Unlock()
	a.rep.latest, a.rep.dirty = &s, true
	now := time.Now()
	wait := a.rep.gate.wait(now, &s)
	if wait == 0 {
		a.publishReportLocked(now)
		return
	}
	if a.rep.timer == nil {
		a.rep.timer = time.AfterFunc(wait, func() {
			a.rep.mu.Lock()
			defer a.rep.mu.Unlock()
			a.rep.timer = nil
			if a.rep.dirty {
				a.publishReportLocked(time.Now())
			}
		})
	}
}

// republishReport sends the newest report again on a new connection:
// one made while the link was down, or lost with it, reaches the hub.
func (a *Agent) republishReport() {
	a.rep.mu.Lock()
	defer a.rep.mu.Unlock()
	if a.rep.latest != nil {
		a.publishReportLocked(time.Now())
	}
}

// publishReportLocked publishes the newest report; under rep.mu, so that
// reports reach the broker in the order they were made.
func (a *Agent) publishReportLocked(now time.Time) {
	s := a.rep.latest
	a.rep.gate.sent(now, s)
	a.rep.dirty = false
	if a.rep.timer != nil {
		a.rep.timer.Stop()
		a.rep.timer = nil
	}
	// While the link is down the next connection publishes it.
	if up, _, _, c := a.linkClient(); up {
		c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindUpdateState), 1, true, protocol.Encode(s))
	}
}

// clip cuts s to at most n bytes at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
