package failover

import (
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

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/syncbuf"
)

// The leader lease's timing here, as in test/replicas: a 3 s TTL
// (renewed every second, taken 400 ms past its expiry); replicas not
// leading look every second. The leader moves within leaderBound of a
// kill -9.
const (
	leaseTTL    = 3 * time.Second
	leaseMargin = leaseTTL * 2 / 15
	leasePoll   = time.Second
	leaderBound = leaseTTL + leaseMargin + leasePoll
)

// hubReplica is one podhub serve on the shared PostgreSQL store and the
// NATS cluster, with its own data directory (a copy of the first's: one
// CA, one hub key) and replica ID; it can be killed and started again.
type hubReplica struct {
	t       *testing.T
	id      string
	dataDir string
	store   string
	cmd     *exec.Cmd
	log     *syncbuf.Buffer // every run's output
	exited  chan struct{}
	client  *api.Client
	health  string // its plain health listener, HOST:PORT
}

// newReplicas makes a data directory under base for each ID from one
// podhub init (the first's copied: the same PKI and hub key) and
// returns the replicas, not started (configure comes first).
func newReplicas(t *testing.T, base, store string, ids []string) []*hubReplica {
	t.Helper()
	first := filepath.Join(base, ids[0])
	if out, err := exec.Command(podhubBin(), "--data-dir", first, "init").CombinedOutput(); err != nil {
		t.Fatalf("podhub init: %v\n%s", err, out)
	}
	var rs []*hubReplica
	for i, id := range ids {
		dir := filepath.Join(base, id)
		if i > 0 {
			if out, err := exec.Command("cp", "-a", first, dir).CombinedOutput(); err != nil {
				t.Fatalf("copying the data directory: %v\n%s", err, out)
			}
		}
		r := &hubReplica{t: t, id: id, dataDir: dir, store: store, log: &syncbuf.Buffer{},
			client: api.NewClient(filepath.Join(dir, "podhub.sock"))}
		t.Cleanup(func() {
			r.stop()
			if t.Failed() {
				t.Logf("replica %s log (last 60 lines):\n%s", id, lastLines(r.log.String(), 60))
			}
		})
		rs = append(rs, r)
	}
	return rs
}

// configure writes the replica's podhub.yaml: the store (which the CLI's
// device add enrols in too), the NATS nodes, and the CA their
// certificates chain to.
func (r *hubReplica) configure(brokers []string) {
	conf := fmt.Sprintf("store: %q\nbrokers: [%s]\ntls: {ca: %s}\n", r.store, strings.Join(brokers, ", "), filepath.Join(r.dataDir, "pki", "ca.pem"))
	if err := os.WriteFile(filepath.Join(r.dataDir, "podhub.yaml"), []byte(conf), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// start runs podhub serve and waits for its API.
func (r *hubReplica) start() {
	r.t.Helper()
	if r.health == "" {
		r.health = freeLoopback(r.t)
	}
	r.cmd = exec.Command(podhubBin(), "--data-dir", r.dataDir, "serve", "--replica-id", r.id, "--leader-lease", leaseTTL.String(),
		"--health-listen", r.health)
	fmt.Fprintf(r.log, "---- podhub serve started %s\n", time.Now().Format(time.StampMilli))
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan struct{})
	r.exited = exited
	cmd := r.cmd
	go func() { cmd.Wait(); close(exited) }()
	waitFor(r.t, 60*time.Second, "replica "+r.id+"'s API (podhub get replicas)", func() bool {
		select {
		case <-exited:
			r.t.Fatalf("replica %s exited:\n%s", r.id, lastLines(r.log.String(), 40))
		default:
		}
		_, err := r.cli("get", "replicas")
		return err == nil
	})
}

// waitReady waits until the replica's /readyz answers 200: its store
// reachable, its broker connection up, its lease state known.
func (r *hubReplica) waitReady(within time.Duration) {
	r.t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	waitUntil(r.t, within, "replica "+r.id+"'s /readyz", func() (bool, string) {
		resp, err := cl.Get("http://" + r.health + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, body)
	})
}

// kill ends the replica with SIGKILL and waits for its exit.
func (r *hubReplica) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// stop ends the replica with SIGTERM (SIGKILL after 20 s).
func (r *hubReplica) stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
		r.t.Errorf("replica %s did not stop within 20s of SIGTERM", r.id)
	}
	r.cmd = nil
}

func (r *hubReplica) cli(args ...string) (string, error) {
	out, err := exec.Command(podhubBin(), append([]string{"--data-dir", r.dataDir}, args...)...).CombinedOutput()
	return string(out), err
}

// replicas is podhub get replicas -o json through r ("" leader and an
// error while it does not answer).
func (r *hubReplica) replicas() (replica.List, error) {
	out, err := r.cli("get", "replicas", "-o", "json")
	if err != nil {
		return replica.List{}, fmt.Errorf("podhub get replicas via %s: %v: %s", r.id, err, out)
	}
	var l replica.List
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return replica.List{}, fmt.Errorf("get replicas -o json: %v: %s", err, out)
	}
	return l, nil
}

// waitUntil polls check every 200 ms for up to within, failing the test
// with what it waited for and the state check last described, after
// explain (if any) logged more; it returns how long it took.
func waitUntil(t *testing.T, within time.Duration, what string, check func() (bool, string), explain ...func()) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, state := check()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			for _, e := range explain {
				e()
			}
			t.Fatalf("waited %v for %s; last: %s", within, what, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFor polls ok every 50 ms for up to within, failing the test with
// what it waited for; it returns how long it took.
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

// freeLoopback is a free address on 127.0.0.1 for a listener.
func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lastLines is the end of a log.
func lastLines(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
