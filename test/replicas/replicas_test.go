package replicas

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/shipped"
	"github.com/podvisor/podvisor/test/workloadfile"
)

var podhub string // the binary, built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podvisor-replicas-")
	if err != nil {
		panic(err)
	}
	if err := shipped.Build(dir, "podhub"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	podhub = filepath.Join(dir, "podhub")
	pgtest.MainThen(m, func() { os.RemoveAll(dir) }) // exits
}

// The lease's timing in the test: a 3 s TTL (renewed every 1 s, taken
// 400 ms past its expiry); replicas not leading look every second.
const (
	leaseTTL = 3 * time.Second
	margin   = leaseTTL * 2 / 15
	poll     = time.Second
)

// lockedBuffer is a log the code under test writes while the test reads it.
type lockedBuffer = syncbuf.Buffer

// hubReplica is one podhub serve, with its own data directory (a copy
// of the first's: the same keys) and its own embedded broker.
type hubReplica struct {
	id      string
	dataDir string
	cmd     *exec.Cmd
	log     *lockedBuffer
	exited  chan struct{}
}

func (r *hubReplica) cli(args ...string) (string, error) {
	out, err := exec.Command(podhub, append([]string{"--data-dir", r.dataDir}, args...)...).CombinedOutput()
	return string(out), err
}

func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startReplica(t *testing.T, id, dataDir, store string, args ...string) *hubReplica {
	t.Helper()
	return startReplicaCmd(t, id, dataDir, append([]string{"serve", "--mqtt-listen", freeLoopback(t),
		"--store", store, "--replica-id", id, "--leader-lease", leaseTTL.String()}, args...)...)
}

// startReplicaCmd runs podhub with args in dataDir and waits for its API.
func startReplicaCmd(t *testing.T, id, dataDir string, args ...string) *hubReplica {
	t.Helper()
	r := &hubReplica{id: id, dataDir: dataDir, log: &lockedBuffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(podhub, append([]string{"--data-dir", dataDir}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("replica %s log:\n%s", id, r.log)
		}
	})
	waitFor(t, 30*time.Second, "replica "+id+"'s API (podhub get replicas)", func() bool {
		select {
		case <-r.exited:
			t.Fatalf("replica %s exited:\n%s", id, r.log)
		default:
		}
		_, err := r.cli("get", "replicas")
		return err == nil
	})
	return r
}

// stop ends the replica with SIGTERM (SIGKILL after 20 s), once.
func (r *hubReplica) stop(t *testing.T) {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
		t.Errorf("replica %s did not stop within 20s of SIGTERM", r.id)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// get is an unauthenticated GET of url, trusting dataDir's CA.
func get(t *testing.T, dataDir, url string) (int, string) {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dataDir, "pki", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// replicas is podhub get replicas -o json through r.
func replicas(t *testing.T, r *hubReplica) replica.List {
	t.Helper()
	out, err := r.cli("get", "replicas", "-o", "json")
	if err != nil {
		t.Fatalf("podhub get replicas via %s: %v\n%s", r.id, err, out)
	}
	var l replica.List
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("get replicas -o json: %v\n%s", err, out)
	}
	return l
}

// replicaList is GET /v1/replicas on r's API socket: what podhub get
// replicas shows, without a CLI process per look (a timed poll measures
// the replicas, not process spawns on a loaded machine).
func replicaList(t *testing.T, r *hubReplica) replica.List {
	t.Helper()
	var l replica.List
	if err := api.NewClient(filepath.Join(r.dataDir, "podhub.sock")).Do("GET", "/v1/replicas", nil, &l); err != nil {
		t.Fatalf("GET /v1/replicas via %s: %v", r.id, err)
	}
	return l
}

// logTime is the time of the first line of a podhub log (slog's text:
// time=… level=… msg=…) that contains every one of parts.
func logTime(log string, parts ...string) (time.Time, bool) {
	for line := range strings.Lines(log) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if !all {
			continue
		}
		field, _, _ := strings.Cut(line, " ")
		if at, err := time.Parse(time.RFC3339, strings.TrimPrefix(field, "time=")); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// webPods are the names of the hub's pods of app web, through r.
func webPods(t *testing.T, r *hubReplica) []string {
	t.Helper()
	out, err := r.cli("get", "pods", "-A", "-o", "json")
	if err != nil {
		t.Fatalf("get pods -A via %s: %v\n%s", r.id, err, out)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("get pods -A -o json: %v\n%s", err, out)
	}
	var names []string
	for _, p := range list.Items {
		if p.Labels["app"] == "web" {
			names = append(names, p.Name)
		}
	}
	return names
}

// Three replicas on one PostgreSQL: one leads; a Deployment applied
// through a follower is scheduled once; kill -9 the leader and another
// takes over within TTL + margin + a poll; SIGTERM the next and the
// last takes over at once (the lease released); the pods never double.
func TestLeaderTakeoverAndHandOff(t *testing.T) {
	store := pgtest.URL(t)
	base := t.TempDir()
	dirs := map[string]string{}
	for _, id := range []string{"a", "b", "c"} {
		dirs[id] = filepath.Join(base, id)
	}
	if out, err := exec.Command(podhub, "--data-dir", dirs["a"], "init").CombinedOutput(); err != nil {
		t.Fatalf("podhub init: %v\n%s", err, out)
	}
	for _, id := range []string{"b", "c"} {
		if out, err := exec.Command("cp", "-a", dirs["a"], dirs[id]).CombinedOutput(); err != nil {
			t.Fatalf("copying the data directory: %v\n%s", err, out)
		}
	}
	rs := map[string]*hubReplica{}
	httpsAddr := freeLoopback(t)
	rs["a"] = startReplica(t, "a", dirs["a"], store, "--http-listen", httpsAddr)
	healthAddr := freeLoopback(t)
	rs["b"] = startReplica(t, "b", dirs["b"], store, "--health-listen", healthAddr)
	rs["c"] = startReplica(t, "c", dirs["c"], store)
	// a's HTTPS listener: ready (store, broker, lease known), live.
	for _, p := range []string{"/readyz", "/livez"} {
		if code, body := get(t, dirs["a"], "https://"+httpsAddr+p); code != 200 || body != "ok" {
			t.Fatalf("%s: %d %q, want 200 ok", p, code, body)
		}
	}
	// b's plain health listener: the health endpoints and nothing else.
	for p, want := range map[string]int{"/readyz": 200, "/livez": 200, "/metrics": 404, "/api/v1/pods": 404} {
		resp, err := http.Get("http://" + healthAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("health listener %s: %d, want %d", p, resp.StatusCode, want)
		}
	}
	l := replicas(t, rs["c"])
	if l.Leader != "a" || l.Token != 1 || len(l.Replicas) != 3 {
		t.Fatalf("after start: leader %q token %d, replicas %+v; want a (the first) with token 1 of 3", l.Leader, l.Token, l.Replicas)
	}
	for _, r := range l.Replicas {
		if !r.Live || r.Leader != (r.ID == "a") {
			t.Fatalf("replica %+v", r)
		}
	}
	table, _ := rs["b"].cli("get", "replicas")
	if !strings.HasPrefix(table, "NAME") || !strings.Contains(table, "LEADER") || strings.Count(table, " true ") != 1 {
		t.Fatalf("get replicas:\n%s", table)
	}
	t.Logf("get replicas:\n%s", table)

	// A Deployment through a follower: scheduled once, by the leader.
	file := filepath.Join(base, "web.yaml")
	os.WriteFile(file, []byte(workloadfile.Deployment("web", 2, `containers:
- {name: main, image: host, command: ["sleep", "1000"]}`)), 0o644)
	if out, err := rs["c"].cli("apply", "-f", file); err != nil {
		t.Fatalf("apply via c: %v\n%s", err, out)
	}
	var pods []string
	// The follower signals the pass to the leader through the change
	// feed, and nothing else would run one (no periodic pass; the
	// scheduler's timer waits for nothing in a fleet without devices):
	// the pods listed at all prove the leader heard it. How soon is the
	// machine's load, so it is only logged.
	scheduled := waitFor(t, 20*time.Second, "the Deployment's 2 pods (get pods -A), scheduled by the leader a on the pass c asked for", func() bool {
		pods = webPods(t, rs["b"])
		return len(pods) == 2
	})
	t.Logf("a Deployment applied through a follower was listed scheduled %v after the apply returned (get pods -A polled)", scheduled.Round(time.Millisecond))

	// kill -9 the leader: another leads within TTL + margin + a poll of
	// the lease's last renewal. Counted on the database's clock from a's
	// last heartbeat to the read that first shows the new leader, not
	// from the kill (up to a renewal period after the renewal) nor by the
	// test's looks. Each round writes the heartbeat just before the
	// renewal; a kill between the two leaves the renewal a round older,
	// which only makes the count shorter.
	killed := time.Now()
	rs["a"].cmd.Process.Kill()
	<-rs["a"].exited
	bound := leaseTTL + margin + poll
	var first replica.List
	waitFor(t, bound+10*time.Second, "b or c leading after kill -9 of a (GET /v1/replicas via b)", func() bool {
		first = replicaList(t, rs["b"])
		return first.Leader == "b" || first.Leader == "c"
	})
	next := first.Leader
	aRow, ok := first.Replica("a") // a's row no longer moves
	if !ok {
		t.Fatalf("the killed replica a not listed: %+v", first.Replicas)
	}
	aBeat := aRow.Heartbeat
	took := first.Now.Sub(aBeat)
	t.Logf("takeover by %s %v after a's last heartbeat, on the database's clock (a killed %v after it; TTL %v + margin %v + poll %v = %v); seen %v after the kill",
		next, took.Round(time.Millisecond), killed.Sub(aBeat).Round(time.Millisecond), leaseTTL, margin, poll, bound, time.Since(killed).Round(time.Millisecond))
	if took > bound+2*time.Second {
		t.Errorf("takeover %v after a's last heartbeat, over the bound %v and 2s of slack", took, bound)
	}
	if first.Token != 2 {
		t.Fatalf("token after the takeover: %d, want 2", first.Token)
	}

	// SIGTERM the new leader: it hands the lease over (the release path
	// of Elector.Stop), not by letting it expire. The release's log line
	// proves it: the release is a compare-and-set on holder and token 2,
	// so it wrote only if no one had taken the lease yet; the last then
	// takes the free lease at its next look. Timed between the two
	// replicas' own log lines (one host's clock): the stop's earlier work
	// (its gateway closes first, renewing meanwhile) is not in it.
	last := map[string]string{"b": "c", "c": "b"}[next]
	term := time.Now()
	rs[next].cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, leaseTTL+10*time.Second, last+" leading after SIGTERM of "+next+" (GET /v1/replicas via "+last+")", func() bool {
		return replicaList(t, rs[last]).Leader == last
	})
	t.Logf("%s seen leading %v after SIGTERM of %s", last, time.Since(term).Round(time.Millisecond), next)
	select {
	case <-rs[next].exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("replica %s did not exit within 20s of SIGTERM", next)
	}
	released, ok := logTime(rs[next].log.String(), `msg="leader lease released"`, "replica="+next+" ", "token=2")
	if !ok {
		t.Fatalf("%s did not release the lease (token 2) at SIGTERM: no \"leader lease released\" in its log (below)", next)
	}
	taken, ok := logTime(rs[last].log.String(), `msg="leader lease taken: this replica leads"`, "replica="+last+" ", "token=3")
	if !ok {
		t.Fatalf("%s leads but did not log taking the lease with token 3 (its log below)", last)
	}
	// A released lease is taken at the next look (Config.Poll), plus
	// that round's statements; the slack is for a loaded machine's. (The
	// take can be logged a moment before the release is: each is logged
	// after its statement returns.)
	handed := taken.Sub(released)
	t.Logf("hand-off at SIGTERM: %s released the lease, %s took it %v later by its logs (poll %v; the TTL %v is not waited for)",
		next, last, handed.Round(time.Millisecond), poll, leaseTTL)
	if handed > poll+2*time.Second {
		t.Errorf("%s took the released lease %v after %s released it, over a poll %v and 2s of slack", last, handed, next, poll)
	}
	l = replicas(t, rs[last])
	if l.Token != 3 {
		t.Fatalf("token after the hand-off: %d, want 3", l.Token)
	}
	// The gone replicas: the stopped one gone at once (it said so), a
	// (killed, silent) not live once its last heartbeat is a TTL old —
	// the hand-off above can come sooner than that.
	for _, r := range l.Replicas {
		if r.ID == next {
			t.Fatalf("after the stop of %s: %+v", next, l.Replicas)
		}
	}
	waitFor(t, leaseTTL+5*time.Second, "the killed a no longer live", func() bool {
		l = replicas(t, rs[last])
		a, listed := l.Replica("a")
		return !listed || !a.Live
	})
	// Two takeovers later, the Deployment still has its two pods.
	time.Sleep(2 * time.Second) // passes of the last leader
	if now := webPods(t, rs[last]); strings.Join(now, ",") != strings.Join(pods, ",") {
		t.Fatalf("the Deployment's pods after two takeovers: %v, before %v", now, pods)
	}
}

// On SQLite one replica only: a second podhub serve on the same file
// (another data directory, so another replica ID) is refused, and the
// first, restarted under its kept ID, is not.
func TestSecondReplicaOnSQLiteRefused(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	if out, err := exec.Command(podhub, "--data-dir", a, "init").CombinedOutput(); err != nil {
		t.Fatalf("podhub init: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", "-a", a, b).CombinedOutput(); err != nil {
		t.Fatalf("copying the data directory: %v\n%s", err, out)
	}
	store := filepath.Join(base, "fleet.db")
	first := &hubReplica{id: "first", dataDir: a, log: &lockedBuffer{}, exited: make(chan struct{})}
	first.cmd = exec.Command(podhub, "--data-dir", a, "serve", "--mqtt-listen", freeLoopback(t), "--store", store)
	first.cmd.Stdout, first.cmd.Stderr = first.log, first.log
	if err := first.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { first.cmd.Wait(); close(first.exited) }()
	defer first.stop(t)
	waitFor(t, 30*time.Second, "the first podhub's API", func() bool {
		_, err := first.cli("get", "replicas")
		return err == nil
	})
	second := exec.Command(podhub, "--data-dir", b, "serve", "--mqtt-listen", freeLoopback(t), "--store", store)
	done := make(chan []byte, 1)
	go func() { out, _ := second.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		t.Logf("the second podhub: %s", bytes.TrimSpace(out))
		if !strings.Contains(string(out), "another podhub") || !strings.Contains(string(out), "PostgreSQL") {
			t.Fatalf("the second podhub on one SQLite file: %s", out)
		}
	case <-time.After(30 * time.Second):
		second.Process.Kill()
		<-done
		t.Fatal("a second podhub on one SQLite file still runs after 30s")
	}
	// The first, killed and restarted at once, is the same replica.
	first.cmd.Process.Kill()
	<-first.exited
	again := startReplicaCmd(t, "first", a, "serve", "--mqtt-listen", freeLoopback(t), "--store", store)
	if l := replicas(t, again); l.Leader == "" || len(l.Replicas) != 1 {
		t.Fatalf("after the restart: %+v", l)
	}
}
