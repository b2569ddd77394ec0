package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/natstest"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// fleetDevices is the simulated fleet's size (PODVISOR_FAILOVER_DEVICES
// sets another). Measured on the 2-core CI machine under load, NATS 2.9
// is what bounds it: each device's persistent session holds a JetStream
// consumer per QoS 1 subscription (8), each a raft group on every node
// (R3). 2,000 devices took 1m49s to be Ready and a node's kill then
// exhausted the nodes' 20,000 file descriptors, the cluster answering
// "JetStream system temporarily unavailable" for minutes; 600 were Ready
// in 60 s but, under a load average of 15, NATS refused subscriptions
// (SUBACK 0x80: consumer creation timed out) and dropped sessions for
// minutes after the kill. Those numbers are of consumers on disc; the
// nodes now keep consumers in memory, still on three nodes
// (natstest.Config: no consumer files, so the file descriptors no longer
// bound it); with that, 2,000 on the quiet machine (twice) were dropped
// by the nodes within a minute of connecting and not taken back in the
// 5 minutes the test waits. 200 pass in about 90 s (docs/brokers.md).
const fleetDevices = 200

// streamPeriod is how often each simulated device reports a new status
// of its sensor pod (and an event) during the stream: 200 devices make
// 10 batches a second, 2,000 a hundred.
const streamPeriod = 20 * time.Second

// The daemonset every device runs after the apply made mid-failover:
// a process pod (a real daemon runs it; a simulated one pretends).
var agentYAML = workloadfile.DaemonSet("agent", `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- {name: main, image: host, command: ["sh", "-c", "exec sleep 1031"]}`)

func fleetSize(t *testing.T) int {
	if s := os.Getenv("PODVISOR_FAILOVER_DEVICES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("PODVISOR_FAILOVER_DEVICES=%q: want a count of devices", s)
		}
		return n
	}
	return fleetDevices
}

// The fleet through a failover: three NATS nodes, one PostgreSQL, three
// podhub replicas, thousands of simulated devices streaming statuses and
// two real daemons. Mid-stream, right after a DaemonSet is applied
// through a follower, the NATS node holding the most devices and the
// leading replica are killed with SIGKILL, then both restarted. Every
// device's newest status reaches the store, no event is stored twice,
// every device applies each desired generation once and the final one
// everywhere, the leader moves within TTL + margin + a poll, and the real
// daemons' pods never restart.
func TestFailover(t *testing.T) {
	prereq.Root(t, "the real daemons run process pods as root in cgroups of their own")
	n := fleetSize(t)
	store := pgtest.URL(t)
	base := t.TempDir()
	rs := newReplicas(t, base, store, []string{"a", "b", "c"})
	sims := simIDs(n)
	reals := []string{"real-1", "real-2"}
	pkiDir := filepath.Join(rs[0].dataDir, "pki")
	setup := time.Now()
	cluster := natstest.Start(t, pkiDir, "", append(slices.Clone(sims), reals...))
	brokers := cluster.URLs()
	hubTLS, err := natstest.HubTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		r.configure(brokers)
		r.start()
	}
	for _, r := range rs {
		r.waitReady(2 * time.Minute)
	}
	db := openStore(t, store)
	t.Logf("NATS cluster and %d replicas up in %v", len(rs), time.Since(setup).Round(time.Millisecond))

	// The devices, enrolled as an operator does before they connect.
	enrolStart := time.Now()
	enrol(t, rs[0], sims, map[string]string{"fleet": "sim"})
	daemons := map[string]*realDaemon{}
	for _, id := range reals {
		daemons[id] = startDaemon(t, rs[0], id, brokers)
	}
	fleet := startSims(t, rs[0].dataDir, brokers, sims)
	// A broker that refuses a subscription (SUBACK 0x80) is read as an
	// ACL's refusal by the hub and the devices, which go on without it;
	// NATS 2.9 refuses one also when it cannot make its JetStream
	// consumer in time (a loaded cluster): a device then misses what
	// that topic brings. Counted at the end, to explain a failure.
	t.Cleanup(func() {
		refused := strings.Count(fleet.log.String(), "refused the subscription")
		for _, r := range rs {
			refused += strings.Count(r.log.String(), "refused the subscription")
		}
		t.Logf("subscriptions the brokers refused (SUBACK 0x80), devices' and replicas': %d", refused)
	})
	all := n + len(reals)
	ready := waitUntil(t, 5*time.Minute, fmt.Sprintf("%d devices Ready (GET /v1/devices)", all), func() (bool, string) {
		notReady := listNotReady(rs[1])
		if notReady == nil {
			return false, "the device list unreadable"
		}
		return len(notReady) == 0, fmt.Sprintf("%d not Ready: %v", len(notReady), head(notReady, 10))
	}, func() { explain(t, db, fleet, rs, listNotReady(rs[1])) })
	t.Logf("%d simulated devices and %d real daemons enrolled, connected and Ready in %v (Ready %v after the agents started)",
		n, len(reals), time.Since(enrolStart).Round(time.Millisecond), ready.Round(time.Millisecond))

	// A pod on each real daemon that must never restart.
	steady := map[string]steadyPod{}
	for i, id := range reals {
		arg := fmt.Sprintf("%d", 1041+i)
		manifest := filepath.Join(base, "steady-"+id+".yaml")
		os.WriteFile(manifest, []byte(processPod("steady", "exec sleep "+arg)), 0o644)
		if out, err := rs[2].cli("apply", "-f", manifest, "--device", id); err != nil {
			t.Fatalf("apply steady to %s: %v\n%s", id, err, out)
		}
		d := daemons[id]
		waitFor(t, 60*time.Second, id+" runs steady", func() bool { p := d.pod("steady"); return p != nil && running(p) })
		p := d.pod("steady")
		// Running is reported once the container's process is started:
		// its shell may exec sleep a moment later (a loaded machine).
		var pid int
		waitFor(t, 10*time.Second, fmt.Sprintf("%s's steady pod's process sleep %s, the pod Running", id, arg),
			func() bool { pid = pidOf("sleep", arg); return pid != 0 })
		steady[id] = steadyPod{container: p.Status.ContainerStatuses[0].ContainerID, pid: pid, arg: arg}
	}

	// The stream, then the apply and the kills in its middle.
	s := fleet.startStream(streamPeriod)
	time.Sleep(streamPeriod / 2)
	before, err := rs[0].replicas()
	if err != nil {
		t.Fatal(err)
	}
	leader := replicaByID(t, rs, before.Leader)
	var follower *hubReplica
	for _, r := range rs {
		if r != leader {
			follower = r
		}
	}
	// The node real-1 is on (a real daemon must move), holding about a
	// third of the simulated devices (they spread by ID).
	node := cluster.NodeOf(reals[0])
	if node < 0 {
		t.Fatalf("%s is on no NATS node", reals[0])
	}
	counts := nodeConnections(cluster)
	onNode := map[string]bool{}
	for _, id := range reals {
		onNode[id] = cluster.NodeOf(id) == node
	}
	manifest := filepath.Join(base, "agent.yaml")
	os.WriteFile(manifest, []byte(agentYAML), 0o644)
	applyStart := time.Now()
	if out, err := follower.cli("apply", "-f", manifest); err != nil {
		t.Fatalf("apply the DaemonSet through %s: %v\n%s", follower.id, err, out)
	}
	applied := time.Since(applyStart)
	realConnects := map[string]int{}
	for id, d := range daemons {
		realConnects[id] = d.connects()
	}
	cluster.Kill(node)
	leader.kill()
	killed := time.Now()
	t.Logf("DaemonSet applied through follower %s in %v; then killed %s (connections on n1..n3: %v) and the leader %s (token %d)",
		follower.id, applied.Round(time.Millisecond), cluster.Nodes[node].Name, counts, leader.id, before.Token)

	// The leader moves: counted on the database's clock from the killed
	// leader's last heartbeat to the read that first names another
	// leader. Each round writes the heartbeat just before the renewal the
	// lease's expiry follows from (a kill between the two leaves the
	// renewal a round older, which only makes the count shorter). Neither
	// the time from that renewal to the kill nor the test's looks are in
	// it: the follower's API socket is read, not a CLI process per look.
	var first replica.List
	waitFor(t, leaderBound+30*time.Second, "a new leader after the kill -9 of "+leader.id+" (GET /v1/replicas via "+follower.id+")", func() bool {
		var l replica.List
		if err := follower.client.Do("GET", "/v1/replicas", nil, &l); err != nil {
			return false // the store or the replica busy: the next look
		}
		first = l
		return l.Leader != "" && l.Leader != leader.id
	})
	after := first.Leader
	killedRow, ok := first.Replica(leader.id) // read after the kill: its row no longer moves
	if !ok {
		t.Fatalf("the killed leader %s not listed: %+v", leader.id, first.Replicas)
	}
	lastBeat := killedRow.Heartbeat
	moved := first.Now.Sub(lastBeat)
	// The devices are back on the two nodes left: those that lost their
	// connection (about a third) each connected again.
	var moves []time.Duration
	waitUntil(t, 3*time.Minute, "every simulated device connected again", func() (bool, string) {
		var down int
		moves = moves[:0]
		for _, d := range fleet.devices {
			l, _ := d.agent.Connection()
			switch {
			case !l.Connected:
				down++
			case l.Since.After(killed):
				moves = append(moves, l.Since.Sub(killed))
			}
		}
		return down == 0, fmt.Sprintf("%d not connected", down)
	})
	reconnected := time.Since(killed)
	realBack := map[string]time.Duration{}
	for id, d := range daemons {
		if onNode[id] {
			waitFor(t, 2*time.Minute, id+" connected again", func() bool { return d.connects() > realConnects[id] })
			realBack[id] = time.Since(killed).Round(time.Millisecond)
		}
	}
	slices.Sort(moves)
	t.Logf("leader %s -> %s %v after %s's last heartbeat, on the database's clock (killed %v after it; bound: TTL %v + margin %v + poll %v = %v)",
		leader.id, after, moved.Round(time.Millisecond), leader.id, killed.Sub(lastBeat).Round(time.Millisecond), leaseTTL, leaseMargin, leasePoll, leaderBound)
	t.Logf("every simulated device connected %v after the kill: %d reconnected (median %v, slowest %v); real daemons on %s back after %v",
		reconnected.Round(time.Millisecond), len(moves), percentile(moves, 50), percentile(moves, 100), cluster.Nodes[node].Name, realBack)
	if moved > leaderBound+2*time.Second {
		t.Errorf("the leader moved %v after %s's last heartbeat, over the bound %v and 2 s of slack", moved, leader.id, leaderBound)
	}

	// Both come back while the stream goes on.
	cluster.Restart(node, hubTLS)
	leader.start()
	leader.waitReady(2 * time.Minute)
	restarted := time.Since(killed)
	time.Sleep(streamPeriod / 2)
	if err := s.end(); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	t.Logf("%s and replica %s restarted %v after the kill; the stream ended %v after it: %d ticks in %v (%.0f/s)",
		cluster.Nodes[node].Name, leader.id, restarted.Round(time.Millisecond), ended.Sub(killed).Round(time.Millisecond),
		s.ticks.Load(), ended.Sub(s.started).Round(time.Millisecond), float64(s.ticks.Load())/ended.Sub(s.started).Seconds())

	// (1) Every device's newest status reaches the store.
	want := map[string]int64{}
	for _, d := range fleet.devices {
		want[d.id] = d.lastTick()
	}
	newest := waitUntil(t, 3*time.Minute, "every simulated device's newest status in the store", func() (bool, string) {
		got, err := db.ticks()
		if err != nil {
			return false, fmt.Sprintf("reading the mirrors: %v", err)
		}
		var behind []string
		for id, n := range want {
			if got[id] != n {
				behind = append(behind, fmt.Sprintf("%s %d/%d", id, got[id], n))
			}
		}
		slices.Sort(behind)
		return len(behind) == 0, fmt.Sprintf("%d devices behind (stored/published): %v", len(behind), head(behind, 10))
	}, func() { explain(t, db, fleet, rs, lagging(want, db)) })
	t.Logf("every device's newest status stored %v after the stream ended (%v after the kills)",
		newest.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	// (3) Every device applies the final generation; none twice.
	waitUntil(t, 3*time.Minute, "every device acknowledging its final desired generation", func() (bool, string) {
		desired, observed, err := db.generations()
		if err != nil {
			return false, fmt.Sprintf("reading generations: %v", err)
		}
		var lagging []string
		for _, id := range append(slices.Clone(sims), reals...) {
			if desired[id] == 0 || observed[id] != desired[id] {
				lagging = append(lagging, fmt.Sprintf("%s %d/%d", id, observed[id], desired[id]))
			}
		}
		for _, d := range fleet.devices {
			g := d.generations()
			if len(g) == 0 || g[len(g)-1] != desired[d.id] {
				lagging = append(lagging, fmt.Sprintf("%s applied %v, desired %d", d.id, g, desired[d.id]))
			}
		}
		slices.Sort(lagging)
		return len(lagging) == 0, fmt.Sprintf("%d behind (observed/desired): %v", len(lagging), head(lagging, 10))
	}, func() { explain(t, db, fleet, rs, unacked(db, fleet)) })
	t.Logf("every device acknowledged its final generation %v after the apply", time.Since(applyStart).Round(time.Millisecond))
	for _, d := range fleet.devices {
		g := d.generations()
		for i := 1; i < len(g); i++ {
			if g[i] <= g[i-1] {
				t.Errorf("%s applied generations %v: generation %d applied again or out of order", d.id, g, g[i])
				break
			}
		}
		if !d.runsApp("agent") {
			t.Errorf("%s does not run the DaemonSet's pod (generations applied: %v)", d.id, g)
		}
	}

	// (2) No event stored twice, every tick's event stored.
	dups, err := db.duplicateEvents()
	if err != nil {
		t.Fatal(err)
	}
	if len(dups) > 0 {
		t.Errorf("%d events stored twice: %v", len(dups), head(dups, 10))
	}
	events, err := db.tickEvents()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for id, n := range want {
		got := events[id]
		if int64(len(got)) != n {
			missing = append(missing, fmt.Sprintf("%s: %d tick events, want %d", id, len(got), n))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d devices' tick events not stored once each: %v", len(missing), head(missing, 10))
	}

	// What each replica handled (its own counts, since its last start).
	if !logSelf(t, rs) {
		t.Error("a replica's GET /v1/replicas/self failed")
	}
	if table, err := rs[0].cli("get", "replicas"); err == nil {
		t.Logf("podhub get replicas:\n%s", table)
	}

	// (5) The real daemons' pods never restarted; they run the DaemonSet.
	for id, d := range daemons {
		waitFor(t, 60*time.Second, id+" runs the DaemonSet's pod", func() bool { return d.runsApp("agent") })
		p := d.pod("steady")
		if p == nil || !running(p) {
			t.Errorf("%s's steady pod after the failover: %v", id, p)
			continue
		}
		c := p.Status.ContainerStatuses[0]
		if c.ContainerID != steady[id].container || c.RestartCount != 0 || pidOf("sleep", steady[id].arg) != steady[id].pid {
			t.Errorf("%s's steady pod restarted: container %s (was %s), %d restarts, pid %d (was %d)", id, c.ContainerID,
				steady[id].container, c.RestartCount, pidOf("sleep", steady[id].arg), steady[id].pid)
		}
	}
}

// steadyPod is what a real daemon's steady pod was before the kills.
type steadyPod struct {
	container string
	pid       int
	arg       string // its sleep's argument, unique on this machine
}

// enrol labels each device through r's API (which adds it to the
// fleet), eight at a time.
func enrol(t *testing.T, r *hubReplica, ids []string, labels map[string]string) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := r.client.Do("PUT", "/v1/devices/"+id+"/labels", labels, nil); err != nil {
					errs <- fmt.Errorf("labelling %s: %w", id, err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// listNotReady are the devices r lists not Ready (nil: the list failed).
func listNotReady(r *hubReplica) []string {
	var ds []fleetdb.Device
	if err := r.client.Do("GET", "/v1/devices", nil, &ds); err != nil {
		return nil
	}
	out := []string{}
	for _, d := range ds {
		if !d.Ready {
			out = append(out, d.ID)
		}
	}
	slices.Sort(out)
	return out
}

// explain logs, for a failure, what the first few of the devices ids
// show: which replica owns each one's bucket, a simulated device's
// connection, outbox and agent's log.
func explain(t *testing.T, db *fleetStore, fleet *simFleet, rs []*hubReplica, ids []string) {
	if len(ids) > 3 {
		ids = ids[:3]
	}
	logSelf(t, rs)
	for _, id := range ids {
		what := fmt.Sprintf("%s: bucket %d held by %s; stored: %s", id, replica.Bucket(id), db.holder(replica.Bucket(id)), db.device(id))
		for _, r := range rs {
			if lines := linesOf(r.log.String(), id, 10); lines != "" {
				what += fmt.Sprintf("\nreplica %s's log of it (last 10 lines):\n%s", r.id, lines)
			}
		}
		if d := fleet.byID[id]; d != nil {
			l, _ := d.agent.Connection()
			st, _ := d.st.Stats()
			what += fmt.Sprintf("; connected %v since %s; outbox %d rows, sent up to %d, receipted up to %d; generations applied %v; agent's log:\n%s",
				l.Connected, l.Since.Format(time.StampMilli), st.Rows, st.Assigned, st.Acked, d.generations(), fleet.logOf(id))
		}
		t.Log(what)
	}
}

// logSelf logs what each replica handled (GET /v1/replicas/self: its
// own counts since its last start); false if one could not be read.
func logSelf(t *testing.T, rs []*hubReplica) bool {
	ok := true
	for _, r := range rs {
		var self struct {
			Buckets     int   `json:"buckets"`
			StatusItems int64 `json:"statusItems"`
			Heartbeats  int64 `json:"heartbeats"`
			Dropped     int64 `json:"dropped"`
		}
		if err := r.client.Do("GET", "/v1/replicas/self", nil, &self); err != nil {
			t.Logf("replica %s: GET /v1/replicas/self: %v", r.id, err)
			ok = false
			continue
		}
		t.Logf("replica %s: %d buckets, %d status items and %d heartbeats handled, %d reports dropped (another's devices)",
			r.id, self.Buckets, self.StatusItems, self.Heartbeats, self.Dropped)
	}
	return ok
}

// linesOf are the last n lines of log that name device id.
func linesOf(log, id string, n int) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"`+id+`"`) || strings.Contains(line, "="+id+" ") || strings.HasSuffix(line, "="+id) {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// lagging are the simulated devices whose newest tick the store lacks.
func lagging(want map[string]int64, db *fleetStore) []string {
	got, _ := db.ticks()
	var out []string
	for id, n := range want {
		if got[id] != n {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// unacked are the simulated devices whose stored ack is not their
// desired generation.
func unacked(db *fleetStore, fleet *simFleet) []string {
	desired, observed, _ := db.generations()
	var out []string
	for _, d := range fleet.devices {
		if observed[d.id] != desired[d.id] || desired[d.id] == 0 {
			out = append(out, d.id)
		}
	}
	return out
}

func replicaByID(t *testing.T, rs []*hubReplica, id string) *hubReplica {
	t.Helper()
	for _, r := range rs {
		if r.id == id {
			return r
		}
	}
	t.Fatalf("no replica %q leads", id)
	return nil
}

// connections is how many client connections node i has (its
// monitoring endpoint's connz), or -1.
func connections(n *natstest.Node) int {
	if !n.Running() {
		return -1
	}
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + n.Monitor + "/connz?limit=1")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var connz struct {
		Total int `json:"total"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&connz); err != nil {
		return -1
	}
	return connz.Total
}

// nodeConnections are every node's connections.
func nodeConnections(c *natstest.Cluster) []int {
	counts := make([]int, natstest.Nodes)
	for i, n := range c.Nodes {
		counts[i] = connections(n)
	}
	return counts
}

// percentile is the p-th percentile of sorted durations (0 if none).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100].Round(time.Millisecond)
}

func head(list []string, n int) []string {
	if len(list) > n {
		return append(list[:n:n], fmt.Sprintf("and %d more", len(list)-n))
	}
	return list
}

// processPod is a pod running one shell command as a process.
func processPod(name, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", %q]
`, name, script)
}
