package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/test/natstest"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/simfleet"
)

// self is GET /v1/replicas/self of r (its local socket).
type self struct {
	ID          string `json:"id"`
	Buckets     int    `json:"buckets"`
	StatusItems int64  `json:"statusItems"`
	Heartbeats  int64  `json:"heartbeats"`
	Dropped     int64  `json:"dropped"`
}

func (r *hubReplica) self(t *testing.T) self {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(r.dataDir, "podhub.sock"))
	}}}
	resp, err := c.Get("http://podhub/v1/replicas/self")
	if err != nil {
		t.Fatalf("replica %s: GET /v1/replicas/self: %v", r.id, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var s self
	if resp.StatusCode != 200 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("replica %s: GET /v1/replicas/self: %d %s", r.id, resp.StatusCode, body)
	}
	return s
}

// quietPods is a simulated device's daemon: it accepts everything.
type quietPods struct{}

func (quietPods) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }
func (quietPods) ApplyAssigned(int64, []*v1.Pod, []string)       {}
func (quietPods) Renew(time.Time)                                {}
func (quietPods) Node() (*v1.Node, error)                        { return simfleet.RoomyNode(), nil }

// loadItems are a device's status update n: its pod "load" with the
// annotation seq=n, and an event naming n.
func loadItems(n int) []store.Item {
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"load","namespace":"default","uid":"load-uid","annotations":{"seq":"%d"}},`+
		`"spec":{"containers":[{"name":"c","image":"host"}]},"status":{"phase":"Running"}}`, n)
	ev, _ := json.Marshal(protocol.Event{Time: time.Now(), Type: "Normal", Reason: "Load", Message: "update " + strconv.Itoa(n)})
	return []store.Item{{Key: "default/load", Kind: store.KindPod, Payload: []byte(pod)}, {Key: "default/load", Kind: store.KindEvent, Payload: ev}}
}

// Three replicas on one PostgreSQL and ONE broker (the first replica's
// embedded broker; the others connect to it as podhub:<id>), 30
// simulated devices streaming statuses: the devices are shared out
// (every replica handles some, drops the others'); kill -9 a replica
// and its devices are handled by the others within TTL + margin + a
// round; every device's newest status is stored, no event twice.
func TestDevicesSharedAcrossReplicas(t *testing.T) { testDevicesShared(t, false) }

// The same on a three-node NATS cluster (test/natstest): the replicas
// and the devices spread over its nodes.
func TestDevicesSharedAcrossReplicasOnNATS(t *testing.T) { testDevicesShared(t, true) }

func testDevicesShared(t *testing.T, onNATS bool) {
	const devices = 30
	storeURL := pgtest.URL(t)
	base := t.TempDir()
	dirs := map[string]string{}
	for _, id := range []string{"a", "b", "c"} {
		dirs[id] = filepath.Join(base, id)
	}
	if out, err := exec.Command(podhub, "--data-dir", dirs["a"], "init").CombinedOutput(); err != nil {
		t.Fatalf("podhub init: %v\n%s", err, out)
	}
	var ids []string
	for i := range devices {
		ids = append(ids, fmt.Sprintf("sim-%02d", i))
	}
	// The broker: a's embedded one, or three NATS nodes; the devices'
	// addresses (spread over the nodes on NATS).
	brokerAddrs := []string{freeLoopback(t)}
	var brokers string
	if onNATS {
		c := natstest.Start(t, filepath.Join(dirs["a"], "pki"), "", ids)
		brokerAddrs = nil
		for _, n := range c.Nodes {
			brokerAddrs = append(brokerAddrs, n.MQTT)
		}
		brokers = "[" + strings.Join(c.URLs(), ", ") + "]"
	} else {
		brokers = "[mqtts://" + brokerAddrs[0] + "]"
	}
	for _, id := range []string{"a", "b", "c"} {
		if id != "a" {
			if out, err := exec.Command("cp", "-a", dirs["a"], dirs[id]).CombinedOutput(); err != nil {
				t.Fatalf("copying the data directory: %v\n%s", err, out)
			}
		}
		if id != "a" || onNATS {
			os.WriteFile(filepath.Join(dirs[id], "podhub.yaml"), []byte(fmt.Sprintf("brokers: %s\ntls: {ca: %s}\n",
				brokers, filepath.Join(dirs[id], "pki", "ca.pem"))), 0o600)
		}
	}
	rs := map[string]*hubReplica{}
	for _, id := range []string{"a", "b", "c"} {
		args := []string{"serve", "--store", storeURL, "--replica-id", id, "--leader-lease", leaseTTL.String()}
		if id == "a" && !onNATS {
			args = append(args, "--mqtt-listen", brokerAddrs[0])
		}
		rs[id] = startReplicaCmd(t, id, dirs[id], args...)
	}
	waitFor(t, 20*time.Second, "the three replicas sharing the 1024 buckets", func() bool {
		sum := 0
		for _, r := range rs {
			s := r.self(t)
			if s.Buckets == 0 {
				return false
			}
			sum += s.Buckets
		}
		return sum == replica.Buckets
	})
	for i := range devices {
		id := fmt.Sprintf("sim-%02d", i)
		if out, err := rs["a"].cli("label", "device", id, "fleet=owners"); err != nil {
			t.Fatalf("label device %s: %v\n%s", id, err, out)
		}
	}
	var enrolments []simfleet.Enrolment
	for _, addr := range brokerAddrs {
		e, err := simfleet.LoadEnrolment(dirs["a"], addr)
		if err != nil {
			t.Fatal(err)
		}
		enrolments = append(enrolments, e)
	}
	silent := slog.New(slog.DiscardHandler)
	stop := make(chan struct{})
	var agents sync.WaitGroup
	var mu sync.Mutex
	last := map[string]int{} // each device's newest update published
	streaming := make(chan struct{})
	for i := range devices {
		id := fmt.Sprintf("sim-%02d", i)
		st, err := store.Open(filepath.Join(base, "devices", id, "state.db"), store.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		a, err := enrolments[i%len(enrolments)].Agent(id, st, quietPods{}, time.Second, silent)
		if err != nil {
			t.Fatal(err)
		}
		agents.Add(2)
		go func() { defer agents.Done(); a.Run(stop); st.Close() }()
		go func() {
			defer agents.Done()
			tick := time.NewTicker(300 * time.Millisecond)
			defer tick.Stop()
			for n := 1; ; n++ {
				if err := a.Publish(loadItems(n)); err != nil {
					t.Errorf("device %s: publishing update %d: %v", id, n, err)
					return
				}
				mu.Lock()
				last[id] = n
				mu.Unlock()
				select {
				case <-streaming:
					return
				case <-tick.C:
				}
			}
		}()
	}
	stopped := false
	stopDevices := func() {
		if !stopped {
			stopped = true
			close(stop)
			agents.Wait()
		}
	}
	defer stopDevices()
	streamStopped := false
	defer func() {
		if !streamStopped {
			close(streaming)
		}
	}()

	fleet, err := fleetdb.OpenStore(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	seqOf := func(id string) int {
		pods, err := fleet.MirrorPods(id, time.Now(), time.Hour)
		if err != nil {
			t.Fatalf("device %s's pods: %v", id, err)
		}
		for _, p := range pods {
			if p.Name == "load" {
				n, _ := strconv.Atoi(p.Annotations["seq"])
				return n
			}
		}
		return 0
	}
	waitFor(t, 30*time.Second, "a status of every device stored", func() bool {
		for i := range devices {
			if seqOf(fmt.Sprintf("sim-%02d", i)) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // a stream under way on every replica
	// Every replica handles some devices and drops the others'.
	before := map[string]self{}
	for id, r := range rs {
		before[id] = r.self(t)
		if before[id].StatusItems == 0 || before[id].Dropped == 0 {
			t.Errorf("replica %s handled %d status items and dropped %d messages: want both above 0 (its share)", id, before[id].StatusItems, before[id].Dropped)
		}
	}
	t.Logf("before the kill: %+v", before)

	// kill -9 b: its buckets go to a and c once its row expired and the
	// margin passed, at their next round.
	killed := time.Now()
	rs["b"].cmd.Process.Signal(syscall.SIGKILL)
	<-rs["b"].exited
	// a and c race for the same lowest free buckets (a compare-and-set
	// each): the loser takes the rest at its next round, so two rounds.
	bound := leaseTTL + margin + 2*poll
	took := waitFor(t, bound+10*time.Second, "a and c holding every bucket after the kill of b", func() bool {
		return rs["a"].self(t).Buckets+rs["c"].self(t).Buckets == replica.Buckets
	})
	t.Logf("b's buckets taken over %v after its kill -9 (TTL %v + margin %v + two rounds of %v = %v)", took.Round(time.Millisecond), leaseTTL, margin, poll, bound)
	if took > bound+2*time.Second {
		t.Errorf("b's buckets taken over after %v, over %v and 2s of slack", took, bound)
	}
	time.Sleep(time.Second) // the stream goes on a little on the two
	close(streaming)
	streamStopped = true
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	final := map[string]int{}
	for id, n := range last {
		final[id] = n
	}
	mu.Unlock()
	newest := waitFor(t, 30*time.Second, "every device's newest status stored", func() bool {
		for id, n := range final {
			if seqOf(id) != n {
				return false
			}
		}
		return true
	})
	t.Logf("every device's newest status stored %v after the kill", time.Since(killed).Round(time.Millisecond))
	_ = newest
	// No event stored twice.
	events := 0
	for id := range final {
		evs, err := fleet.Events(id)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range evs {
			if e.Reason != "Load" {
				continue
			}
			if seen[e.Message] {
				t.Errorf("device %s: event %q stored twice", id, e.Message)
			}
			seen[e.Message] = true
			events++
		}
	}
	after := map[string]self{"a": rs["a"].self(t), "c": rs["c"].self(t)}
	t.Logf("after: %+v; %d events stored, none twice", after, events)
	for _, id := range []string{"a", "c"} {
		if after[id].StatusItems <= before[id].StatusItems {
			t.Errorf("replica %s stored no status item after b's kill", id)
		}
	}
}
