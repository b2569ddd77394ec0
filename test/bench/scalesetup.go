package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver: the store's size

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/natstest"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/syncbuf"
)

// The three setups of make bench-scale, each started on its own and
// stopped before the next: podhub on SQLite, podhub on PostgreSQL (both
// with the embedded broker), and replicas on PostgreSQL behind a
// three-node NATS cluster.
const (
	setupSQLite   = "sqlite"
	setupPostgres = "postgres"
	setupReplicas = "replicas"
	// setupReplicasEmbedded is the replicas on PostgreSQL behind the
	// first one's embedded broker: replicas apart from the broker.
	setupReplicasEmbedded = "replicas-embedded"
)

// scaleSetup is one running setup: its podhub processes, the broker
// processes apart from them (NATS; none with the embedded broker) and
// the database server (PostgreSQL; nil on SQLite).
type scaleSetup struct {
	name    string
	hubs    []*scaleHub
	brokers []*natstest.Node
	db      *pgtest.Server
	addrs   []string // the MQTT addresses devices connect to
	store   string   // the fleet store: its PostgreSQL URL, or its SQLite file
	stops   []func()
}

// scaleHub is one podhub serve of a setup.
type scaleHub struct {
	id     string // its replica ID ("" alone on SQLite)
	data   string
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	client *api.Client
	exited chan struct{}
}

func (h *scaleHub) pid() int { return h.cmd.Process.Pid }

// stop ends podhub with SIGTERM (its hand-off), SIGKILL after 30 s.
func (h *scaleHub) stop() {
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
}

func (s *scaleSetup) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// startScaleSetup starts setup name in dir for the devices ids; pg is
// the PostgreSQL server the PostgreSQL setups make their database on.
func startScaleSetup(name, podhub, dir string, pg *pgtest.Server, ids []string) (_ *scaleSetup, err error) {
	s := &scaleSetup{name: name}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	first := filepath.Join(dir, "podhub")
	if out, err := exec.Command(podhub, "--data-dir", first, "init").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("podhub init: %v %s", err, out)
	}
	// Devices stay Ready for three of their (seldom) heartbeats.
	common := []string{"serve", "--device-timeout", (3 * *hubHeartbeat).String()}
	switch name {
	case setupSQLite:
		addr := freePort()
		s.store = filepath.Join(first, "fleet.db")
		h, err := startScaleHub(podhub, first, "", append(common, "--mqtt-listen", addr)...)
		if err != nil {
			return nil, err
		}
		s.hubs, s.addrs, s.stops = []*scaleHub{h}, []string{addr}, append(s.stops, h.stop)
	case setupPostgres:
		url, err := pg.CreateDatabase("bench_" + name)
		if err != nil {
			return nil, err
		}
		s.db, s.store = pg, url
		addr := freePort()
		h, err := startScaleHub(podhub, first, "", append(common, "--mqtt-listen", addr, "--store", url)...)
		if err != nil {
			return nil, err
		}
		s.hubs, s.addrs, s.stops = []*scaleHub{h}, []string{addr}, append(s.stops, h.stop)
	case setupReplicas, setupReplicasEmbedded:
		url, err := pg.CreateDatabase("bench_" + strings.ReplaceAll(name, "-", "_"))
		if err != nil {
			return nil, err
		}
		s.db, s.store = pg, url
		// Every replica's data directory a copy of the first's (the same
		// keys and CA), made before any runs.
		datas := []string{first}
		for i := 1; i < *scaleReplicas; i++ {
			data := filepath.Join(dir, fmt.Sprintf("podhub-r%d", i+1))
			if out, err := exec.Command("cp", "-a", first, data).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("copying podhub's data directory: %v %s", err, out)
			}
			datas = append(datas, data)
		}
		var urls []string // the brokers the replicas reach (podhub.yaml brokers:)
		if name == setupReplicas {
			natsDir := filepath.Join(dir, "nats")
			if err := os.MkdirAll(natsDir, 0o700); err != nil {
				return nil, err
			}
			var extra []string
			for _, m := range strings.Split(*scaleNATSMQTT, ";") {
				if m = strings.TrimSpace(m); m != "" {
					extra = append(extra, m)
				}
			}
			c, err := natstest.StartCluster(natsDir, filepath.Join(first, "pki"), "", ids, extra...)
			if err != nil {
				return nil, err
			}
			s.stops = append(s.stops, c.Stop)
			s.brokers = c.Nodes[:]
			for _, n := range c.Nodes {
				s.addrs = append(s.addrs, n.MQTT)
			}
			urls = c.URLs()
		} else {
			// The first replica's embedded broker: the others connect to
			// it with the hub's certificate, as replicas of their own.
			s.addrs = []string{freePort()}
			urls = []string{"mqtts://" + s.addrs[0]}
		}
		for i, data := range datas {
			id := fmt.Sprintf("r%d", i+1)
			args := append(append([]string{}, common...), "--store", url, "--replica-id", id)
			if name == setupReplicasEmbedded && i == 0 {
				args = append(args, "--mqtt-listen", s.addrs[0])
			} else {
				// The brokers, and the CA that signed their certificate.
				conf := fmt.Sprintf("brokers: [%s]\ntls: {ca: %s}\n", strings.Join(urls, ", "), filepath.Join(data, "pki", "ca.pem"))
				if err := os.WriteFile(filepath.Join(data, "podhub.yaml"), []byte(conf), 0o600); err != nil {
					return nil, err
				}
			}
			h, err := startScaleHub(podhub, data, id, args...)
			if err != nil {
				return nil, err
			}
			s.hubs = append(s.hubs, h)
			s.stops = append(s.stops, h.stop)
		}
		// The devices come to a fleet at rest: every replica holding its
		// share of the buckets (a report arriving while a bucket moves
		// is dropped by both, and a device's first heartbeat lost so
		// would leave it NotReady until its next one).
		took, err := waitBuckets(podhub, first, len(datas), time.Minute)
		if err != nil {
			return nil, err
		}
		fmt.Printf("  %d replicas hold their shares of the device buckets %6.1f s after the last started\n", len(datas), took.Seconds())
	default:
		return nil, fmt.Errorf("-scale-setups: unknown setup %q (sqlite, postgres, replicas-embedded, replicas)", name)
	}
	return s, nil
}

// startScaleHub runs podhub with args on data and waits (1 min at most)
// until its API answers.
func startScaleHub(podhub, data, id string, args ...string) (*scaleHub, error) {
	h := &scaleHub{id: id, data: data, log: &syncbuf.Buffer{}, exited: make(chan struct{})}
	h.cmd = exec.Command(podhub, append([]string{"--data-dir", data}, args...)...)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { h.cmd.Wait(); close(h.exited) }()
	h.client = api.NewClient(filepath.Join(data, "podhub.sock"))
	for deadline := time.Now().Add(time.Minute); h.client.Do("GET", "/v1/devices", nil, nil) != nil; time.Sleep(50 * time.Millisecond) {
		select {
		case <-h.exited:
			return nil, fmt.Errorf("podhub %s exited:\n%s", id, h.log.String())
		default:
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("podhub %s's API did not answer within 1 min:\n%s", id, h.log.String())
		}
	}
	return h, nil
}

// memory is the setup's processes' memory now: each podhub's RSS, each
// broker node's RSS, and the database server's PSS (its backends
// share its buffers: summed RSS would count them once per backend).
func (s *scaleSetup) memory() (hubs, brokers []float64, db float64) {
	for _, h := range s.hubs {
		hubs = append(hubs, rss(h.pid()).total)
	}
	for _, n := range s.brokers {
		brokers = append(brokers, rss(n.Pid()).total)
	}
	if s.db != nil {
		pids := append([]int{s.db.Pid()}, childrenOf([]int{s.db.Pid()}, "postgres")...)
		db = groupOf("postgres", pids).pss
	}
	return hubs, brokers, db
}

// cpuTicks are the setup's processes' CPU ticks so far: podhubs,
// brokers, and the database server with its backends (their own and
// their ended children's).
func (s *scaleSetup) cpuTicks() (hubs, brokers, db uint64) {
	for _, h := range s.hubs {
		t, _ := cpuTicks(h.pid())
		hubs += t
	}
	for _, n := range s.brokers {
		t, _ := cpuTicks(n.Pid())
		brokers += t
	}
	if s.db != nil {
		self, children := cpuTicks(s.db.Pid())
		db = self + children
		for _, pid := range childrenOf([]int{s.db.Pid()}, "postgres") {
			t, _ := cpuTicks(pid)
			db += t
		}
	}
	return hubs, brokers, db
}

// logs are the ends of the podhubs' logs, for a failure's report.
func (s *scaleSetup) logs() string {
	var b bytes.Buffer
	for _, h := range s.hubs {
		fmt.Fprintf(&b, "podhub %s's log ends:\n%s\n", h.id, lastLines(h.log.String(), 20))
	}
	for _, n := range s.brokers {
		fmt.Fprintf(&b, "nats-server %s's log ends:\n%s\n", n.Name, lastLines(n.Log(), 20))
	}
	return b.String()
}

// storeSize is the fleet store's size: PostgreSQL's database size, or
// the SQLite file with its write-ahead log.
func (s *scaleSetup) storeSize() (int64, error) {
	if s.db == nil {
		var total int64
		for _, f := range []string{s.store, s.store + "-wal"} {
			if st, err := os.Stat(f); err == nil {
				total += st.Size()
			} else if f == s.store {
				return 0, err
			}
		}
		return total, nil
	}
	db, err := sql.Open("pgx", s.store)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var size int64
	err = db.QueryRow(`SELECT pg_database_size(current_database())`).Scan(&size)
	return size, err
}

// waitBuckets waits until n live replicas hold all the device buckets,
// each its share, as podhub get replicas (through data) lists them.
func waitBuckets(podhub, data string, n int, within time.Duration) (time.Duration, error) {
	start := time.Now()
	// Each takes up to its share, the last what the others left.
	least := replica.Buckets - (n-1)*((replica.Buckets+n-1)/n)
	var last string
	for time.Since(start) < within {
		out, err := exec.Command(podhub, "--data-dir", data, "get", "replicas", "-o", "json").Output()
		var l replica.List
		if err == nil && json.Unmarshal(out, &l) == nil {
			total, settled := 0, len(l.Replicas) == n
			for _, r := range l.Replicas {
				total += r.Buckets
				settled = settled && r.Live && r.Buckets >= least
			}
			if settled && total == replica.Buckets {
				return time.Since(start), nil
			}
		}
		last = string(out)
		time.Sleep(250 * time.Millisecond)
	}
	return 0, fmt.Errorf("the replicas did not share the device buckets within %v; podhub get replicas:\n%s", within, last)
}
