package e2e

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// fleetRig is a hub with its embedded broker, run in the test process.
type fleetRig struct {
	addr    string
	broker  *broker.Broker
	fleet   *fleetdb.Fleet
	hub     *hub.Hub
	pubFile string
}

func newFleetRig(t *testing.T) *fleetRig {
	r := &fleetRig{addr: freeLoopback(t)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var err error
	if r.broker, err = broker.Start(r.addr, log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.broker.Close() })
	pub, priv, _ := ed25519.GenerateKey(nil)
	r.pubFile = filepath.Join(t.TempDir(), "hub.pub")
	os.WriteFile(r.pubFile, protocol.EncodePublicKey(pub), 0o644)
	if r.fleet, err = fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.fleet.Close() })
	r.hub = hub.New(hub.Config{Broker: "mqtt://" + r.addr, Key: priv}, r.fleet, log)
	if err := r.hub.Start(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.hub.Close)
	return r
}

// enrol adds a device to the fleet, as the operator does: the hub
// believes reports only from devices it knows.
func (r *fleetRig) enrol(t *testing.T, device string) {
	t.Helper()
	if err := r.fleet.AddDevice(device); err != nil {
		t.Fatal(err)
	}
}

// apply sends manifests (YAML) to a device.
func (r *fleetRig) apply(t *testing.T, device string, manifests ...string) {
	t.Helper()
	var pods []json.RawMessage
	for _, m := range manifests {
		j, err := yaml.YAMLToJSON([]byte(m))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, j)
	}
	if _, err := r.hub.Apply(device, pods); err != nil {
		t.Fatal(err)
	}
}

// restartBroker starts the embedded broker again on the same address.
func (r *fleetRig) restartBroker(t *testing.T) {
	var err error
	if r.broker, err = broker.Start(r.addr, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))); err != nil {
		t.Fatal(err)
	}
}

func (r *fleetRig) mirror(device, key string) *v1.Pod {
	ms, _ := r.fleet.Mirrors(device)
	for _, m := range ms {
		if m.Key == key {
			var p v1.Pod
			json.Unmarshal(m.Pod, &p)
			return &p
		}
	}
	return nil
}

// A hub pod runs on the device beside its file pods, and both are
// mirrored at the hub; one named like a file pod is refused with the
// reason; hub pods run on after a daemon kill -9 with the hub gone, and
// a deletion at the hub stops them.
func TestHubPodsOnTheDevice(t *testing.T) {
	r := newFleetRig(t)
	r.enrol(t, "e2e-1")
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: e2e-1, key: %s, allowProcessPods: true, allowRootProcessPods: true}\n", r.addr, r.pubFile))
	d.write("local.yaml", processPod("local", "Always", 1, "exec sleep 1000"))
	d.start()

	r.apply(t, "e2e-1", processPod("hubweb", "Always", 1, "echo from the hub; exec sleep 1001"))
	p := d.waitPod("hubweb", 20*time.Second, running)
	if src := p.Annotations["podvisor.io/source"]; src != "hub" {
		t.Fatalf("hubweb's source annotation is %q, want hub", src)
	}
	waitForLong(t, 20*time.Second, "both pods mirrored at the hub, Running", func() bool {
		hw, lo := r.mirror("e2e-1", "default/hubweb"), r.mirror("e2e-1", "default/local")
		return hw != nil && lo != nil && running(hw) && running(lo)
	})
	a, _ := r.fleet.LastAck("e2e-1")
	if a == nil || a.ObservedGeneration != 1 || !a.Pods[0].Accepted {
		t.Fatalf("ack %+v", a)
	}

	// A hub pod named like a file pod: refused, the file pod untouched.
	r.apply(t, "e2e-1", processPod("local", "Always", 1, "exec sleep 1002"))
	waitForLong(t, 20*time.Second, "generation 2 acked", func() bool {
		a, _ := r.fleet.LastAck("e2e-1")
		return a != nil && a.ObservedGeneration == 2
	})
	a, _ = r.fleet.LastAck("e2e-1")
	var verdict string
	for _, pr := range a.Pods {
		if pr.Name == "local" {
			verdict = fmt.Sprintf("%v %s", pr.Accepted, pr.Reason)
		}
	}
	if !strings.HasPrefix(verdict, "false") || !strings.Contains(verdict, "local.yaml") {
		t.Fatalf("the colliding hub pod's verdict: %q", verdict)
	}

	// kill -9 the daemon and take the hub away: the restarted daemon runs
	// the hub pod on, the same container, from what it stored.
	before := d.waitPod("hubweb", 5*time.Second, running).Status.ContainerStatuses[0]
	d.stop(syscall.SIGKILL)
	r.broker.Close()
	d.start()
	p = d.waitPod("hubweb", 20*time.Second, running)
	if got := p.Status.ContainerStatuses[0]; got.ContainerID != before.ContainerID || got.RestartCount != 0 ||
		!got.State.Running.StartedAt.Equal(&before.State.Running.StartedAt) {
		t.Fatalf("after the restart without a hub: %+v, want the same container %s", got, before.ContainerID)
	}

	// The hub comes back; deleting the pod there stops it here.
	r.restartBroker(t)
	if _, err := r.hub.Delete("e2e-1", "default", "hubweb"); err != nil {
		t.Fatal(err)
	}
	d.waitGone("hubweb", 30*time.Second)
	waitForLong(t, 30*time.Second, "hubweb's mirror removed at the hub", func() bool { return r.mirror("e2e-1", "default/hubweb") == nil })
	if lo := r.mirror("e2e-1", "default/local"); lo == nil || !running(lo) {
		t.Fatalf("the file pod's mirror: %+v", lo)
	}
}
