package hub_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/lease"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// podhub fence device: the device's next document, signed, carries no
// pod and a fence naming every pod it had; the device applies it and
// keeps it across a restart (the stored document); applying to it is
// refused; the fence is lifted only once the device applied it and
// reports none of its pods.
func TestFenceReachesTheDeviceSignedAndSurvivesARestart(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	db := filepath.Join(r.dir, "device.db")
	_, _, halt := r.device("gw-1", db, pods)
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("web"), podJSON("db")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "generation 1 applied", func() bool { g, _, _ := pods.state(); return g == 1 })

	gen, err := r.hub.Fence("gw-1")
	if err != nil {
		t.Fatal(err)
	}
	// Unfence (below) needs the hub to hold the device's ack of the
	// fence, which the device sends after applying it.
	eventually(t, 10*time.Second, "the fence applied and its ack at the hub", func() bool {
		g, _, _ := pods.state()
		a, _ := r.fleet.LastAck("gw-1")
		return g == gen && a != nil && a.ObservedGeneration == gen
	})
	pods.mu.Lock()
	fence, running := slices.Clone(pods.fence), len(pods.pods)
	pods.mu.Unlock()
	if fmt.Sprint(fence) != "[default/web default/db]" || running != 0 {
		t.Fatalf("the device got fence %v and %d pods, want [default/web default/db] and none", fence, running)
	}
	// The stored document is the hub's, signed, with the fence.
	doc, _ := r.fleet.Desired("gw-1")
	d, err := protocol.OpenDesired(doc.Document, "gw-1", r.pub, false)
	if err != nil || d.Fence == nil || len(d.Pods) != 0 || d.Fence.Since.IsZero() {
		t.Fatalf("stored document: %+v, %v", d, err)
	}
	devs, _ := r.fleet.Devices(time.Now(), time.Minute)
	if len(devs) != 1 || devs[0].FencedAt == nil {
		t.Fatalf("devices %+v, want gw-1 fenced", devs)
	}
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("web")}); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("apply to a fenced device: %v, want refused", err)
	}

	// A restart, offline: the stored document still fences.
	halt()
	st, err := store.Open(db, store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := uplink.New(uplink.Config{Broker: "mqtt://127.0.0.1:1", DeviceID: "gw-1", HubKey: r.pub}, st, &fakePods{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	g, stored, storedFence, err := ag.Stored()
	st.Close()
	if err != nil || g != gen || len(stored) != 0 || fmt.Sprint(storedFence) != "[default/web default/db]" {
		t.Fatalf("after a restart: generation %d pods %d fence %v (%v)", g, len(stored), storedFence, err)
	}

	// The device applied the fence and reports no pod: it may be lifted.
	if _, err := r.hub.Unfence("gw-1"); err != nil {
		t.Fatal(err)
	}
	if f, _ := r.fleet.Fence("gw-1"); f.Fenced() {
		t.Fatal("still fenced after unfence")
	}
}

// A fence the device has not applied cannot be lifted: it could run
// again, next to their replacements, the pods it never learnt were gone.
func TestUnfenceRefusedUntilTheDeviceAppliedIt(t *testing.T) {
	r := newRig(t)
	if _, err := r.hub.Apply("gw-2", []json.RawMessage{podJSON("web")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.hub.Fence("gw-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.hub.Unfence("gw-2"); !errors.Is(err, fleetdb.ErrFenceNotDelivered) {
		t.Fatalf("unfence before the device applied the fence: %v, want ErrFenceNotDelivered", err)
	}
	// Fencing again keeps the first fence's time and widens nothing.
	f1, _ := r.fleet.Fence("gw-2")
	if _, err := r.hub.Fence("gw-2"); err != nil {
		t.Fatal(err)
	}
	f2, _ := r.fleet.Fence("gw-2")
	if !f1.Since.Equal(f2.Since) || fmt.Sprint(f2.Pods) != "[default/web]" {
		t.Fatalf("fence again: %+v then %+v", f1, f2)
	}
}

// The hub answers every heartbeat with its number; the device renews its
// leases at the send time of an answered heartbeat, and only after it
// took the connection's desired document.
func TestHeartbeatReceiptsRenewLeases(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	if _, err := r.hub.Apply("gw-3", []json.RawMessage{podJSON("web")}); err != nil {
		t.Fatal(err)
	}
	before := lease.Now()
	r.deviceWith("gw-3", filepath.Join(r.dir, "d3.db"), pods, func(c *uplink.Config) { c.Heartbeat = 200 * time.Millisecond })
	eventually(t, 10*time.Second, "two renewals", func() bool {
		pods.mu.Lock()
		defer pods.mu.Unlock()
		return len(pods.renewed) >= 2
	})
	pods.mu.Lock()
	defer pods.mu.Unlock()
	if pods.renewedEarly {
		t.Fatal("renewed before the connection's document was applied")
	}
	for i, at := range pods.renewed {
		if at.Before(before) || at.After(lease.Now()) || (i > 0 && !at.After(pods.renewed[i-1])) {
			t.Fatalf("renewals %v: each must be a later send time within the test", pods.renewed)
		}
	}
}

// Through the API: the fenced device's hub pods are replaced on other
// devices in the next pass — evicted by the out-of-service taint while it
// is heard from, force-deleted once it is not; its document is signed
// again with no pod and a fence naming them.
func TestFenceThroughTheAPIReplacesItsPods(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c", "d4": "a"})
	r.apply(fleetYAML)
	r.pass()
	live, _ := r.placed()
	fenced := live["bridge"][0]
	before := r.desired(fenced)
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	body, _ := json.Marshal(api.FenceRequest{})
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/devices/"+fenced+"/fence", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fence: %d %s", resp.StatusCode, out)
	}
	r.pass()
	live, term := r.placed()
	for app, devs := range live {
		if slices.Contains(devs, fenced) {
			t.Errorf("%s still placed on the fenced %s", app, fenced)
		}
	}
	if len(live["bridge"]) != 3 {
		t.Fatalf("bridge on %v, want 3 live elsewhere", live["bridge"])
	}
	for _, at := range term {
		if !strings.HasSuffix(at, "@"+fenced) {
			t.Errorf("terminating %s, not on the fenced device", at)
		}
	}
	if apps := r.desired(fenced); len(apps) != 0 {
		t.Fatalf("the fenced device is given %v", apps)
	}
	doc, _ := r.fleet.Desired(fenced)
	d, err := protocol.OpenDesired(doc.Document, fenced, nil, true)
	if err != nil || d.Fence == nil || len(d.Fence.Pods) != len(before) {
		t.Fatalf("document %+v (%v): want a fence naming its %d pods", d, err, len(before))
	}
	// The fenced device falls silent: what it had not confirmed is
	// forgotten, not waited for.
	r.now = r.now.Add(time.Minute)
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		if id != fenced {
			r.heartbeat(id)
		}
	}
	r.pass()
	if _, term := r.placed(); len(term) != 0 {
		t.Fatalf("terminating %v: a fenced, silent device's pods are force-deleted", term)
	}
	if live, _ := r.placed(); slices.Contains(live["agent"], fenced) || len(live["bridge"]) != 3 {
		t.Fatalf("after the force deletion: %v", live)
	}
}
