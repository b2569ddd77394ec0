package uplink_test

import (
	"crypto/ed25519"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	hubbroker "github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/uplink"
)

// updateHub plays the hub's side of the update topics: it publishes
// orders and reads the device's reports.
type updateHub struct {
	t      *testing.T
	client mqtt.Client
	topics protocol.Topics
	mu     sync.Mutex
	states []protocol.UpdateState
}

func connectUpdateHub(t *testing.T, addr string) *updateHub {
	t.Helper()
	h := &updateHub{t: t}
	h.client = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("the-update-hub").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true))
	if tok := h.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the hub's client cannot connect to %s: %v", addr, tok.Error())
	}
	c := h.client
	t.Cleanup(func() { c.Disconnect(0) })
	tok := h.client.Subscribe(h.topics.Device("gw-1", protocol.KindUpdateState), 1, func(_ mqtt.Client, m mqtt.Message) {
		s, err := protocol.DecodeUpdateState(m.Payload())
		if err != nil {
			t.Errorf("the device's update state: %v", err)
			return
		}
		h.mu.Lock()
		h.states = append(h.states, *s)
		h.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribing: %v", tok.Error())
	}
	return h
}

func (h *updateHub) order(payload []byte) {
	h.t.Helper()
	if tok := h.client.Publish(h.topics.Device("gw-1", protocol.KindUpdate), 1, true, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		h.t.Fatalf("publishing an order: %v", tok.Error())
	}
}

func (h *updateHub) reports() []protocol.UpdateState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]protocol.UpdateState(nil), h.states...)
}

func (h *updateHub) reported(match func(protocol.UpdateState) bool) bool {
	return slices.ContainsFunc(h.reports(), match)
}

func signedOrder(t *testing.T, key ed25519.PrivateKey, device string, id int64) []byte {
	t.Helper()
	b, err := protocol.SignOrder(protocol.Order{Device: device, ID: id}, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// orderLog records the orders handed to the updater.
type orderLog struct {
	mu  sync.Mutex
	ids []int64
}

func (l *orderLog) take(o *protocol.Order) {
	l.mu.Lock()
	l.ids = append(l.ids, o.ID)
	l.mu.Unlock()
}

func (l *orderLog) get() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.ids...)
}

// Orders reach the updater only when they verify with the hub key, name
// this device and are newer than any handed out: a forged order, an
// unsigned one (though unsigned desired documents are allowed here), one
// for another device, an older one are not; the forged and the unsigned
// are reported Failed with the reason. After a restart the current order
// is handed out once more, an older one never.
func TestUpdateOrders(t *testing.T) {
	tb := startBroker(t)
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, forger, _ := ed25519.GenerateKey(nil)
	h := connectUpdateHub(t, tb.addr)
	h.order(signedOrder(t, priv, "gw-1", 1))

	dir := t.TempDir()
	var got orderLog
	cfg := func(c *uplink.Config) {
		c.HubKey = pub
		c.AllowUnsigned = true
		c.OnUpdateOrder = got.take
	}
	_, stop := startDeviceStop(t, tb.addr, dir, cfg)
	eventually(t, "order 1 handed out", func() bool { return slices.Equal(got.get(), []int64{1}) })

	h.order(signedOrder(t, forger, "gw-1", 5))
	eventually(t, "the forged order 5 reported Failed", func() bool {
		return h.reported(func(s protocol.UpdateState) bool {
			return s.Order == 5 && s.Phase == protocol.UpdateFailed && strings.Contains(s.Reason, "does not verify")
		})
	})
	h.order(signedOrder(t, priv, "gw-2", 6))
	unsigned, _ := json.Marshal(protocol.SignedDoc{Schema: protocol.Schema, Doc: json.RawMessage(`{"schema":1,"device":"gw-1","id":7}`)})
	h.order(unsigned)
	eventually(t, "the unsigned order 7 reported Failed", func() bool {
		return h.reported(func(s protocol.UpdateState) bool {
			return s.Order == 7 && s.Phase == protocol.UpdateFailed && strings.Contains(s.Reason, "not signed")
		})
	})
	h.order(signedOrder(t, priv, "gw-1", 8))
	// Newest only: an order superseded before the updater took it is
	// skipped, so the test waits for 8 before sending more.
	eventually(t, "order 8 handed out", func() bool { return slices.Contains(got.get(), 8) })
	h.order(signedOrder(t, priv, "gw-1", 4)) // older
	h.order(signedOrder(t, priv, "gw-1", 8)) // again
	h.order(signedOrder(t, priv, "gw-1", 9))
	eventually(t, "order 9 handed out", func() bool { return slices.Contains(got.get(), 9) })
	if ids := got.get(); !slices.Equal(ids, []int64{1, 8, 9}) {
		t.Fatalf("orders handed out %v, want 1, 8, 9", ids)
	}
	if h.reported(func(s protocol.UpdateState) bool { return s.Order == 6 || s.Order == 4 }) {
		t.Fatalf("reports %+v: an order for another device or an older one reported", h.reports())
	}

	// A restart: the retained order 9 comes once more; then an older one
	// (a replay after the hub's retained order was cleared) is refused.
	stop()
	t.Run("restart", func(t *testing.T) {
		var again orderLog
		startDevice(t, tb.addr, dir, func(c *uplink.Config) {
			cfg(c)
			c.OnUpdateOrder = again.take
		})
		eventually(t, "order 9 handed out again after the restart", func() bool { return slices.Equal(again.get(), []int64{9}) })
		h.order(signedOrder(t, priv, "gw-1", 3))
		h.order(signedOrder(t, priv, "gw-1", 9))
		h.order(signedOrder(t, priv, "gw-1", 10))
		eventually(t, "order 10 handed out", func() bool { return slices.Contains(again.get(), 10) })
		if ids := again.get(); !slices.Equal(ids, []int64{9, 10}) {
			t.Fatalf("orders handed out after the restart %v, want 9, 10", ids)
		}
	})
}

// Reports are retained and the newest wins: progress within a phase is
// rate-limited but its last value goes out, a phase change at once; one
// made while the broker is away goes out after the reconnection.
func TestUpdateReports(t *testing.T) {
	tb := startBroker(t)
	h := connectUpdateHub(t, tb.addr)
	a := startDevice(t, tb.addr, t.TempDir(), nil)
	// Made before the connection, perhaps: it goes out at the connection.
	a.Report(protocol.UpdateState{Order: 1, Kind: protocol.ReleaseAgent, Version: "v2.0.0", Phase: protocol.UpdateDownloading})
	eventually(t, "the first report published", func() bool { return len(h.reports()) > 0 })
	for p := 1; p <= 100; p++ {
		a.Report(protocol.UpdateState{Order: 1, Kind: protocol.ReleaseAgent, Version: "v2.0.0", Phase: protocol.UpdateDownloading, Percent: p})
	}
	eventually(t, "100% reported", func() bool {
		r := h.reports()
		return r[len(r)-1].Percent == 100
	})
	if n := len(h.reports()); n > 4 {
		t.Fatalf("%d reports for a burst of 100 progress steps", n)
	}
	a.Report(protocol.UpdateState{Order: 1, Kind: protocol.ReleaseAgent, Version: "v2.0.0", Phase: protocol.UpdateVerifying})
	eventually(t, "Verifying reported", func() bool {
		r := h.reports()
		return r[len(r)-1].Phase == protocol.UpdateVerifying
	})

	tb.b.Close()
	a.Report(protocol.UpdateState{Order: 1, Kind: protocol.ReleaseAgent, Version: "v2.0.0", Phase: protocol.UpdateFailed, Reason: "disk full"})
	tb.start() // a new broker: it holds no retained report
	h2 := connectUpdateHub(t, tb.addr)
	eventually(t, "the report made while away published after the reconnection", func() bool {
		return h2.reported(func(s protocol.UpdateState) bool { return s.Phase == protocol.UpdateFailed && s.Reason == "disk full" })
	})
	// Retained: a hub that connects later learns it.
	h3 := connectUpdateHub(t, tb.addr)
	eventually(t, "the retained report", func() bool {
		r := h3.reports()
		return len(r) > 0 && r[len(r)-1].Phase == protocol.UpdateFailed && r[len(r)-1].Device == "gw-1"
	})
}

// HubReached closes at the hub's receipt of a heartbeat of this run.
func TestHubReached(t *testing.T) {
	tb := startBroker(t)
	far := connectHub(t, tb.addr, nil)
	tok := far.client.Subscribe(far.topics.Device("gw-1", protocol.KindHeartbeat), 1, func(c mqtt.Client, m mqtt.Message) {
		hb, err := protocol.DecodeHeartbeat(m.Payload())
		if err != nil {
			t.Errorf("heartbeat: %v", err)
			return
		}
		c.Publish(far.topics.Device("gw-1", protocol.KindStatusAck), 1, false, protocol.Encode(&protocol.StatusAck{Epoch: "x", Beat: hb.Beat}))
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	a := startDevice(t, tb.addr, t.TempDir(), nil)
	select {
	case <-a.HubReached():
	case <-time.After(20 * time.Second):
		t.Fatal("not within 20s: the hub's receipt of a heartbeat")
	}
}

// A report goes out within the broker's limit for a retained update
// state (4 KiB) however its reason encodes: JSON makes each <, > and &
// six bytes, and a report over the limit gets the device disconnected by
// the broker, at every reconnection (the report is sent again then).
func TestReportFitsTheBrokersLimit(t *testing.T) {
	tb := startBroker(t)
	sizes := make(chan int, 16)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + tb.addr).SetClientID("size-watcher").SetCleanSession(true).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting: %v", tok.Error())
	}
	defer c.Disconnect(0)
	topic := (protocol.Topics{}).Device("gw-1", protocol.KindUpdateState)
	if tok := c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { sizes <- len(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribing: %v", tok.Error())
	}
	a := startDevice(t, tb.addr, t.TempDir(), nil)
	a.Report(protocol.UpdateState{Order: 1, Kind: protocol.ReleaseFirmware, Version: "v2.0.0", Phase: protocol.UpdateFailed,
		Reason: "rauc: " + strings.Repeat("<&>", 400)})
	select {
	case n := <-sizes:
		if n > hubbroker.MaxRetainedUpdateStateBytes {
			t.Fatalf("a report of %d bytes, over the broker's %d", n, hubbroker.MaxRetainedUpdateStateBytes)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waited 20s for the report")
	}
}
