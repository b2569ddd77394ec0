package updates

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// publisher stores orders as the device link does (the fleet database
// keeps them across a restart) and counts them.
type publisher struct {
	fleet     *fleetdb.Fleet
	ordered   []string
	withdrawn []string
}

func (p *publisher) Order(device, update string, release []byte, _ bool) (int64, error) {
	id, err := p.fleet.NextOrderID(device)
	if err == nil {
		err = p.fleet.SaveOrder(fleetdb.Order{Device: device, ID: id, Update: update, Document: release})
	}
	p.ordered = append(p.ordered, device)
	return id, err
}

func (p *publisher) Withdraw(device string) error {
	id, err := p.fleet.NextOrderID(device)
	if err == nil {
		err = p.fleet.SaveOrder(fleetdb.Order{Device: device, ID: id, Document: []byte("{}")})
	}
	p.withdrawn = append(p.withdrawn, device)
	return err
}

// The driver over a real fleet database: orders are stored, a driver
// started again (a hub restart) neither repeats nor loses them, and the
// devices' reports and heartbeats move the update on.
func TestDriverOverTheFleetDatabase(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { return now }
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	manifest, err := protocol.SignRelease(protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0",
		Artifacts: []protocol.Artifact{{Name: "podvisor", Arch: "arm64", Size: 1, SHA256: fmt.Sprintf("%064x", 1)}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.AddRelease(fleetdb.StoredRelease{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Manifest: manifest, Created: now}); err != nil {
		t.Fatal(err)
	}
	heartbeat := func(id, version string) {
		node := v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{Architecture: "arm64", OperatingSystem: "linux"}}
		if _, _, err := fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Version: version, Node: node}, now); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("d%d", i)
		fleet.SetLabels(id, map[string]string{"site": "a"})
		fleet.SavePresence(id, &protocol.Presence{Device: id, Online: true}, now)
		heartbeat(id, "v1.1.0")
	}
	pub := &publisher{fleet: fleet}
	log := slog.New(slog.DiscardHandler)
	d := NewDriver(fleet, pub, log, clock, time.Minute)
	spec, err := d.Create(Request{Version: "v1.2.0", Selector: map[string]string{"site": "a"}, MaxUnavailable: "2"})
	if err != nil || spec.Name != "podvisor-v1.2.0" || len(spec.Targets) != 4 {
		t.Fatalf("create: %+v, %v", spec, err)
	}
	if _, err := d.Create(Request{Version: "v1.2.0", Device: "d0"}); err == nil {
		t.Fatal("a second update over a device of an unfinished one was made")
	}
	if _, err := d.Create(Request{Version: "v9.9.9", Device: "d0"}); err == nil {
		t.Fatal("an update of a release that is not stored was made")
	}
	if err := d.Pass(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pub.ordered, []string{"d0", "d1"}) {
		t.Fatalf("ordered %v, want d0 d1", pub.ordered)
	}
	// The next pass comes unasked when the targets, heard from now, go
	// stale: a timer, not polling.
	if want := now.Add(time.Minute); !d.wake.Equal(want) {
		t.Fatalf("the driver wakes at %v, want when the targets go stale, %v", d.wake, want)
	}
	// A restarted hub: a new driver over the same database orders no one
	// again while the wave is under way.
	d = NewDriver(fleet, pub, log, clock, time.Minute)
	d.Pass()
	if len(pub.ordered) != 2 {
		t.Fatalf("after a restart, ordered %v", pub.ordered)
	}
	for _, id := range []string{"d0", "d1"} {
		o, _ := fleet.DeviceOrder(id)
		fleet.SaveUpdateState(&protocol.UpdateState{Device: id, Order: o.ID, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: protocol.UpdateCommitted}, now)
		heartbeat(id, "v1.2.0")
	}
	d.Pass()
	if !slices.Equal(pub.ordered, []string{"d0", "d1", "d2", "d3"}) {
		t.Fatalf("ordered %v, want the second wave", pub.ordered)
	}
	if _, err := d.Change("podvisor-v1.2.0", "abort"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pub.withdrawn, []string{"d2", "d3"}) {
		t.Fatalf("withdrawn %v, want d2 d3", pub.withdrawn)
	}
	u, _ := fleet.Update("podvisor-v1.2.0")
	if u.Active {
		t.Fatal("an aborted update is still active")
	}
	if _, err := d.Change("podvisor-v1.2.0", "resume"); err == nil {
		t.Fatal("an aborted update resumed")
	}
	// Another update over the same devices may start now.
	if _, err := d.Create(Request{Version: "v1.2.0", Device: "d3"}); err != nil {
		t.Fatalf("an update after the abort: %v", err)
	}
}

// A device kicks the driver with every report that changes (its
// percent, its version in a heartbeat), at its message rate; a pass reads
// every target of every active update and writes its status. Kicked
// passes are spaced by minPassGap, so one device's credentials cannot
// keep the hub passing back to back.
func TestKickedPassesAreSpaced(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	d := NewDriver(fleet, &publisher{fleet: fleet}, slog.New(slog.DiscardHandler), nil, time.Minute)
	gaps := make(chan time.Duration, 10)
	d.pause = func(gap time.Duration) bool { gaps <- gap; return true }
	d.Start()
	defer d.Close()
	for i := range 3 {
		d.Kick()
		select {
		case gap := <-gaps:
			if gap > minPassGap { // minPassGap less the pass's time
				t.Fatalf("pass %d: a pause of %v after it, want up to %v", i, gap, minPassGap)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10s for the driver to pause after kicked pass %d", i)
		}
	}
}
