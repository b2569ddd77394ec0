package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/gateway"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/pki"
)

// replicaIDFile keeps the replica's derived ID in the data directory, so
// that a restart is the same replica.
const replicaIDFile = "replica-id"

// replicaID is the replica's ID: --replica-id (replicaID of
// podhub.yaml), else the one kept in the data directory, else a new
// one, this host's name and a random suffix, kept there.
func (c *cli) replicaID(cfg config) (string, error) {
	if cfg.ReplicaID != "" {
		return cfg.ReplicaID, replica.CheckID(cfg.ReplicaID)
	}
	path := c.path(replicaIDFile)
	if data, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(data))
		if err := replica.CheckID(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	host, _ := os.Hostname()
	id := hostLabel(host) + "-" + randomHex(3)
	if err := writeFileMode(path, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, nil
}

// hostLabel is host as a replica ID's first part: lowercase, characters
// an ID may not have made '-', at most 56 characters ("podhub" if none
// is left).
func hostLabel(host string) string {
	var b strings.Builder
	for _, c := range []byte(strings.ToLower(host)) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('-')
		}
		if b.Len() == 56 {
			break
		}
	}
	s := strings.Trim(b.String(), "-.")
	if s == "" {
		return "podhub"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// leaseTiming is the leader lease's timing from --leader-lease (the
// TTL): renewed every third of it, taken by another 2/15 of it after
// it ran out (15s: every 5s, 2s).
func leaseTiming(ttl string) (replica.Timing, error) {
	if ttl == "" {
		return replica.DefaultTiming, nil
	}
	d, err := time.ParseDuration(ttl)
	if err != nil || d < 3*time.Second || d > 10*time.Minute {
		return replica.Timing{}, fmt.Errorf("leader lease %q: want a duration from 3s to 10m", ttl)
	}
	return replica.Timing{TTL: d, Renew: d / 3, Margin: d * 2 / 15}, nil
}

// startReplica makes this podhub one replica on its store and joins:
// the hub's leader work gated on the lease (hub.UseReplica). On an
// SQLite store a second replica is refused.
func (c *cli) startReplica(cfg config, fleet *fleetdb.Fleet, h *hub.Hub, log *slog.Logger) (*replica.Elector, func(), error) {
	id, err := c.replicaID(cfg)
	if err != nil {
		return nil, nil, err
	}
	timing, err := leaseTiming(cfg.LeaderLease)
	if err != nil {
		return nil, nil, err
	}
	address := cfg.HTTP.Listen
	if address == "" {
		address, _ = os.Hostname()
	}
	lock, err := lockDataDir(c.dataDir)
	if err != nil {
		return nil, nil, err
	}
	store, closeStore, err := c.electorStore(cfg, fleet)
	if err != nil {
		lock.unlock()
		return nil, nil, err
	}
	e, err := replica.New(store, replica.Config{ID: id, Address: address, Version: version,
		Timing: timing, Log: log, Predecessor: lock.predecessor})
	if err != nil {
		closeStore()
		lock.unlock()
		return nil, nil, err
	}
	unlock := func() {
		closeStore()
		lock.unlock()
	}
	h.UseReplica(e)
	if err := e.Start(); err != nil {
		unlock()
		return nil, nil, err
	}
	if err := lock.keep(e.Nonce()); err != nil {
		log.Warn("keeping the replica's nonce in the data directory", "err", err)
	}
	log.Info("replica joined", "replica", id, "leading", e.Leading(), "others", e.OthersAtStart(),
		"deviceBuckets", e.Ownership().Count())
	return e, unlock, nil
}

// electorConns is the elector's own pool on PostgreSQL: its heartbeats
// and lease renewals never wait behind the store's writers (every
// writer transaction queues for one lock, sqldb/postgres).
const electorConns = 2

// electorStore is the replicas' tables as the elector reaches them: on
// PostgreSQL over a small pool of its own, on SQLite over the fleet's
// (one replica, one connection).
func (c *cli) electorStore(cfg config, fleet *fleetdb.Fleet) (*replica.Store, func(), error) {
	if fleet.Dialect() == sqldb.SQLite {
		return replica.NewStore(fleet.SQL()), func() {}, nil
	}
	db, err := postgres.Open(c.storeOf(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("the replica's own connections: %w", err)
	}
	db.SetMaxOpenConns(electorConns)
	db.SetMaxIdleConns(electorConns)
	return replica.NewStore(&sqldb.DB{DB: db, Dialect: sqldb.Postgres}), func() { db.Close() }, nil
}

// replicaClient sets the hub's MQTT client ID: "podhub:<replica ID>" on
// a PostgreSQL store, where several replicas share one broker (each its
// own session; the broker's ACL lets the hub's certificate use it:
// docs/brokers.md), "podhub" on SQLite (one replica, as ever). A
// replica on an external broker ends its session when it stops.
func (c *cli) replicaClient(cfg config, fleet *fleetdb.Fleet, hcfg *hub.Config, embedded bool) error {
	if fleet.Dialect() == sqldb.SQLite {
		return nil
	}
	id, err := c.replicaID(cfg)
	if err != nil {
		return err
	}
	hcfg.ClientID = pki.HubIdentity + ":" + id
	hcfg.EndSession = !embedded
	return nil
}

// readinessTimeout bounds /readyz's ping of the store.
const readinessTimeout = 2 * time.Second

// readyChecks is /readyz's checks: the store answers, the broker is
// connected, and the replica knows the leader lease's state (it read it
// within a TTL). /livez stays ok while the process serves.
func readyChecks(fleet *fleetdb.Fleet, h *hub.Hub, e *replica.Elector) func() []gateway.Check {
	return func() []gateway.Check {
		ctx, cancel := context.WithTimeout(context.Background(), readinessTimeout)
		defer cancel()
		checks := []gateway.Check{{Name: "store", Err: fleet.SQL().PingContext(ctx)}, {Name: "broker"}, {Name: "leader-lease"}}
		if !h.Link.Connected() {
			checks[1].Err = errors.New("not connected to the broker")
		}
		if !e.Known() {
			checks[2].Err = errors.New("the leader lease was not read within its TTL")
		}
		return checks
	}
}

// serveHealth serves gateway.Health on a plain HTTP listener at addr
// until the returned stop: probes need no certificate and no login, and
// nothing but the health endpoints is there.
func serveHealth(addr string, ready func() []gateway.Check, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener: %w", err)
	}
	srv := &http.Server{Handler: gateway.Health(ready, log), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health listener", "err", err)
		}
	}()
	log.Info("health listener (plain HTTP: /livez, /readyz, /healthz)", "address", l.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}

// handleReplicas serves GET /v1/replicas: the store's replicas and the
// leader lease.
func handleReplicas(mux *http.ServeMux, fleet *fleetdb.Fleet) {
	store := replica.NewStore(fleet.SQL())
	mux.HandleFunc("GET /v1/replicas", func(w http.ResponseWriter, r *http.Request) {
		l, err := store.List()
		if err == nil {
			var ids []string
			if ids, err = fleet.Select(nil); err == nil { // every device
				l.CountDevices(ids)
			}
		}
		replyJSON(w, l, err)
	})
}

// getReplicas prints podhub get replicas.
func (c *cli) getReplicas(output string) error {
	var l replica.List
	if err := c.client().Do("GET", "/v1/replicas", nil, &l); err != nil {
		return err
	}
	if output != "" && output != "wide" {
		return printObject(c, l, output)
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tSTATUS\tLEADER\tBUCKETS\tDEVICES\tADDRESS\tVERSION\tAGE\tLAST-HEARTBEAT")
	for _, r := range l.Replicas {
		status := "NotReady"
		if r.Live {
			status = "Ready"
		}
		// Ages on the database's clock, the one the lease is counted on.
		fmt.Fprintf(w, "%s\t%s\t%t\t%d\t%d\t%s\t%s\t%s\t%s\n", r.ID, status, r.Leader, r.Buckets, r.Devices, orNone(r.Address), orNone(r.Version),
			ago(l.Now, r.Started), ago(l.Now, r.Heartbeat))
	}
	return w.Flush()
}

// dirLock is the data directory's replica lock, held while the replica
// runs: a second podhub serve on one data directory is refused at once.
type dirLock struct {
	file      *os.File
	noncePath string
	// predecessor is the nonce the previous process there kept: that
	// process is dead, since its lock was free, so its replica row is
	// taken over at once after a kill -9 rather than watched for a
	// renewal period.
	predecessor string
}

func lockDataDir(dir string) (*dirLock, error) {
	lockPath := filepath.Join(dir, "replica.lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("replica lock %s: %w", lockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("replica lock %s: another podhub serve runs with this data directory (%v)", lockPath, err)
	}
	l := &dirLock{file: f, noncePath: filepath.Join(dir, "replica.nonce")}
	if b, err := os.ReadFile(l.noncePath); err == nil && len(b) <= 64 {
		l.predecessor = strings.TrimSpace(string(b))
	}
	return l, nil
}

// keep writes this process's nonce for the next process.
func (l *dirLock) keep(nonce string) error {
	tmp := l.noncePath + ".tmp"
	if err := os.WriteFile(tmp, []byte(nonce+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.noncePath)
}

// unlock releases the lock (closing the file releases the flock).
func (l *dirLock) unlock() { l.file.Close() }

// linkCounts counts what this replica's device link stored (for GET
// /v1/replicas/self), and tells next (hubmetrics' counters).
type linkCounts struct {
	next                    devicelink.Observer
	statusItems, heartbeats atomic.Int64
}

func (c *linkCounts) StatusItemsStored(n int) {
	c.statusItems.Add(int64(n))
	c.next.StatusItemsStored(n)
}
func (c *linkCounts) HeartbeatStored()         { c.heartbeats.Add(1); c.next.HeartbeatStored() }
func (c *linkCounts) MessageRefused(k string)  { c.next.MessageRefused(k) }
func (c *linkCounts) MessageNotOwned(k string) { c.next.MessageNotOwned(k) }

// Self is this replica as GET /v1/replicas/self shows it: what its
// device link handled and dropped since it started, and the device
// buckets it holds now.
type Self struct {
	ID string `json:"id"`
	// Buckets is how many device buckets it holds (valid now).
	Buckets int `json:"buckets"`
	// StatusItems and Heartbeats are what it stored; Dropped the
	// devices' messages it left to the replicas owning them.
	StatusItems int64 `json:"statusItems"`
	Heartbeats  int64 `json:"heartbeats"`
	Dropped     int64 `json:"dropped"`
}

// handleReplicaSelf serves GET /v1/replicas/self on the local socket.
func handleReplicaSelf(mux *http.ServeMux, e *replica.Elector, h *hub.Hub, c *linkCounts) {
	mux.HandleFunc("GET /v1/replicas/self", func(w http.ResponseWriter, r *http.Request) {
		held := 0
		if o := e.Ownership(); o != nil && time.Now().Before(o.Until) {
			held = o.Count()
		}
		replyJSON(w, Self{ID: e.ID(), Buckets: held, StatusItems: c.statusItems.Load(), Heartbeats: c.heartbeats.Load(),
			Dropped: h.Link.Dropped()}, nil)
	})
}
