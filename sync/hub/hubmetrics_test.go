package hub_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/hubmetrics"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// newMetricsRig is newRig with the hub's metrics wired as podhub serve
// wires them: the counters made first, the link's Observer, then read
// by the /metrics handler.
func newMetricsRig(t *testing.T) (*rig, *hubmetrics.Metrics) {
	r := &rig{t: t, addr: freeAddr(t), dir: t.TempDir()}
	var err error
	if r.broker, err = broker.Start(r.addr, quiet()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.broker.Close() })
	var priv ed25519.PrivateKey
	r.pub, priv, _ = ed25519.GenerateKey(nil)
	if r.fleet, err = fleetdb.Open(filepath.Join(r.dir, "fleet.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.fleet.Close() })
	counters := hubmetrics.NewCounters()
	r.hub = hub.New(hub.Config{Broker: "mqtt://" + r.addr, Key: priv, Observe: counters}, r.fleet, quiet())
	if err := r.hub.Start(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.hub.Close)
	return r, hubmetrics.New(hubmetrics.Config{Fleet: r.fleet, Workloads: r.hub.Workloads(), Counters: counters, Version: "test"})
}

// scrapeValues scrapes m and parses it with Prometheus' parser: each
// sample's value by family name and its labels' values joined by ",".
func scrapeValues(t *testing.T, m *hubmetrics.Metrics) map[string]float64 {
	t.Helper()
	body, err := m.Exposition(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus' parser refused the exposition: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, s := range f.Metric {
			key := name
			for _, l := range s.Label {
				key += "," + l.GetValue()
			}
			out[key] = value(s)
		}
	}
	return out
}

func value(s *dto.Metric) float64 {
	if s.Counter != nil {
		return s.Counter.GetValue()
	}
	return s.Gauge.GetValue()
}

// Through a real broker and a real device agent: the device shows
// Ready, its heartbeats and status items are counted as the link stores
// them, and a forged heartbeat (naming another device) is counted
// refused, by kind.
func TestMetricsThroughTheLink(t *testing.T) {
	r, m := newMetricsRig(t)
	a, _, _ := r.deviceWith("gw-m", filepath.Join(r.dir, "device.db"), &fakePods{},
		func(c *uplink.Config) { c.Heartbeat = 100 * time.Millisecond })
	items := []store.Item{
		{Key: "default/web", Kind: store.KindPod, Payload: mirror("web", 1)},
		{Key: "default/db", Kind: store.KindPod, Payload: mirror("db", 1)},
		{Key: "default/job", Kind: store.KindPod, Payload: mirror("job", 1)},
	}
	if err := a.Publish(items); err != nil {
		t.Fatal(err)
	}
	// The hub subscribes after its connection is up, kind by kind: the
	// heartbeats below are not retained, so the hub must be listening to
	// heartbeats first (gw-m's own, stored, prove it).
	eventually(t, 10*time.Second, "gw-m's heartbeat stored (the hub subscribed)", func() bool {
		d, _ := r.fleet.GetDevice("gw-m", time.Now(), time.Minute)
		return d.Ready
	})
	rogue := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + r.addr).SetClientID("rogue"))
	if tok := rogue.Connect(); tok.Wait() && tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer rogue.Disconnect(0)
	rogue.Publish(protocol.Topics{}.Device("gw-m", protocol.KindHeartbeat), 1, false,
		protocol.Encode(&protocol.Heartbeat{Device: "another"})).Wait()

	// gw-n is a device whose daemon sends a metrics snapshot (its
	// presence and heartbeat sent here as its agent would).
	if err := r.fleet.AddDevice("gw-n"); err != nil {
		t.Fatal(err)
	}
	rogue.Publish(protocol.Topics{}.Device("gw-n", protocol.KindPresence), 1, true,
		protocol.Encode(&protocol.Presence{Device: "gw-n", Online: true})).Wait()
	rogue.Publish(protocol.Topics{}.Device("gw-n", protocol.KindHeartbeat), 1, false,
		protocol.Encode(&protocol.Heartbeat{Device: "gw-n", Version: "v9", Metrics: &protocol.MetricsSnapshot{RunningPods: 2, ContainerRestarts: 4,
			Pressure: &protocol.PressureSnapshot{Memory: 12}}})).Wait()

	var got map[string]float64
	eventually(t, 10*time.Second, "the scrape to show gw-m and gw-n Ready, 3 Running pods, 3 status items, 3+ heartbeats, the forged heartbeat refused and gw-n's snapshot", func() bool {
		got = scrapeValues(t, m)
		return got["podhub_devices,ready"] == 2 && got["podhub_device_ready,gw-m"] == 1 && got["podhub_pods,Running"] == 3 &&
			got["podhub_status_items_total"] == 3 && got["podhub_heartbeats_total"] >= 3 &&
			got["podhub_refused_messages_total,heartbeat"] == 1 &&
			got["podhub_device_running_pods,gw-n"] == 2 && got["podhub_device_container_restarts_total,gw-n"] == 4 &&
			got["podhub_device_pressure_avg10_ratio,gw-n,memory"] == 0.12
	})
	if _, ok := got["podhub_device_running_pods,gw-m"]; ok {
		t.Errorf("gw-m sends no snapshot, yet has podhub_device_running_pods")
	}
	if got["podhub_devices,offline"] != 0 || got["podhub_build_info,test,"+goVersion(got)] != 1 {
		t.Fatalf("scrape: %v", got)
	}
}

// goVersion finds the goversion label of podhub_build_info.
func goVersion(samples map[string]float64) string {
	for k := range samples {
		if rest, ok := bytes.CutPrefix([]byte(k), []byte("podhub_build_info,test,")); ok {
			return string(rest)
		}
	}
	return ""
}
