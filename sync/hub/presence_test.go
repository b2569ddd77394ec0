package hub_test

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// Two replicas starting together on a fleet no replica served: the
// first to join forgets the stale presence; the second, which joined
// seeing the first live, stores a device's presence before the first's
// hub has started. The first's start must not mark that device offline
// (it did: each replica that saw no other at its join forgot the
// presence when its hub started, whatever the others stored meanwhile).
func TestAReplicaStartingNeverForgetsThePresenceALiveReplicaStored(t *testing.T) {
	url := pgtest.URL(t)
	_, key, _ := ed25519.GenerateKey(nil)
	fleet, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	online := func(f *fleetdb.Fleet, id string) bool {
		t.Helper()
		d, err := f.GetDevice(id, time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return d.Online
	}
	// stale: online when the whole hub stopped, gone since (its broker
	// kept no retained presence to say so).
	for _, id := range []string{"stale", "dev1"} {
		if err := fleet.AddDevice(id); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.SavePresence(id, &protocol.Presence{Device: id, Online: true}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}

	// The first replica joins (its hub not started yet).
	first := hub.New(hub.Config{Broker: "mqtt://127.0.0.1:1", Key: key, DeviceTimeout: time.Minute}, fleet, quiet())
	e, err := replica.New(replica.NewStore(fleet.SQL()), replica.Config{ID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	first.UseReplica(e)
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop() })

	// The second joins seeing the first, and stores dev1's presence (a
	// retained message or the device's connection).
	second := startPGReplica(t, url, "second", key)
	if n := second.elector.OthersAtStart(); n != 1 {
		t.Fatalf("the second replica saw %d others at its join, want 1", n)
	}
	if _, err := second.fleet.SavePresence("dev1", &protocol.Presence{Device: "dev1", Online: true}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// The first's hub starts.
	if err := first.Start(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	if !online(fleet, "dev1") {
		t.Fatal("dev1, stored online by the live second replica, is offline after the first replica's hub started")
	}
	if online(fleet, "stale") {
		t.Fatal("the stale device is still online after the fleet's first replica started; want its presence forgotten")
	}

	// A third replica, joining live ones, forgets nothing.
	startPGReplica(t, url, "third", key)
	if !online(fleet, "dev1") {
		t.Fatal("dev1 is offline after a third replica joined the live ones")
	}
}
