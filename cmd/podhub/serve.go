package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/hub/chunks"
	"github.com/podvisor/podvisor/sync/hub/hubmetrics"
	"github.com/podvisor/podvisor/sync/hub/objectlink"
	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/tlsconfig"
)

// defaultListen is the embedded broker's address: loopback unless the
// operator opens it (it always speaks TLS with client certificates).
const defaultListen = "127.0.0.1:8883"

// config is <data-dir>/podhub.yaml, written by init.
type config struct {
	MQTTListen string `json:"mqttListen,omitempty"`
	// Broker is an external broker's URL, or several nodes of one
	// cluster separated by commas; Brokers is the list form (brokers.go).
	Broker        string   `json:"broker,omitempty"`
	Brokers       []string `json:"brokers,omitempty"`
	Prefix        string   `json:"prefix,omitempty"`
	DeviceTimeout string   `json:"deviceTimeout,omitempty"`
	// MemoryLimit is podhub's soft memory limit: auto, off or a size
	// (gclimit.go).
	MemoryLimit string `json:"memoryLimit,omitempty"`
	// Store is the fleet store: a postgres:// or postgresql:// URL (a
	// PostgreSQL database), sqlite:PATH or a path (an SQLite file; a
	// relative path is under the data directory). Default
	// <data-dir>/fleet.db (store.go).
	Store string `json:"store,omitempty"`
	// ReplicaID names this podhub among the replicas on its store
	// (default: kept in <data-dir>/replica-id; replicas.go).
	ReplicaID string `json:"replicaID,omitempty"`
	// LeaderLease is the leader lease's TTL (default 15s; replicas.go).
	LeaderLease string `json:"leaderLease,omitempty"`
	// HealthListen is a plain HTTP listener of /livez, /readyz and
	// /healthz only, for probes (off unless set; replicas.go).
	HealthListen string `json:"healthListen,omitempty"`
	// SecretsKeyFile is the key Secrets are sealed with in fleet.db
	// (default <data-dir>/secrets.key; secretskey.go).
	SecretsKeyFile string `json:"secretsKeyFile,omitempty"`
	Username       string `json:"username,omitempty"`
	PasswordFile   string `json:"passwordFile,omitempty"`
	TLS            struct {
		CA   string `json:"ca,omitempty"`
		Cert string `json:"cert,omitempty"`
		Key  string `json:"key,omitempty"`
	} `json:"tls"`
	// Updates bounds the artifact transfers of updates (podhub update).
	Updates struct {
		// ChunkRate is each device's transfer rate, bytes a second (a
		// quantity: 4Mi). Default 4Mi.
		ChunkRate string `json:"chunkRate,omitempty"`
		// ChunkReads bounds the artifact reads under way. Default 4.
		ChunkReads int `json:"chunkReads,omitempty"`
	} `json:"updates"`
	// Objects bounds the ConfigMaps and Secrets each device is given.
	Objects struct {
		// MaxObjects is the most objects of one device. Default 256.
		MaxObjects int `json:"maxObjects,omitempty"`
		// MaxBytes is the most data of one device's objects (a quantity:
		// 16Mi). Default 16Mi.
		MaxBytes string `json:"maxBytes,omitempty"`
	} `json:"objects"`
	// HTTP is the HTTPS listener: dashboard, /metrics, Kubernetes API
	// (https.go). Off unless http.listen is set.
	HTTP httpConfig `json:"http"`
}

// objectLimits are the per-device object bounds from podhub.yaml.
func (cfg config) objectLimits() (objectlink.Limits, error) {
	out := objectlink.Limits{MaxObjects: cfg.Objects.MaxObjects}
	if out.MaxObjects < 0 || out.MaxObjects > protocol.MaxObjectEntries {
		return out, fmt.Errorf("podhub.yaml: objects.maxObjects %d: want 1 to %d", out.MaxObjects, protocol.MaxObjectEntries)
	}
	if cfg.Objects.MaxBytes != "" {
		q, err := resource.ParseQuantity(cfg.Objects.MaxBytes)
		if err != nil || q.Value() < 1<<20 {
			return out, fmt.Errorf("podhub.yaml: objects.maxBytes %q: want a size of at least 1Mi (the largest object's)", cfg.Objects.MaxBytes)
		}
		out.MaxBytes = q.Value()
	}
	return out, nil
}

// chunkConfig is the chunk server's bounds from podhub.yaml.
func (cfg config) chunkConfig() (chunks.Config, error) {
	out := chunks.Config{Reads: cfg.Updates.ChunkReads}
	if cfg.Updates.ChunkRate != "" {
		q, err := resource.ParseQuantity(cfg.Updates.ChunkRate)
		if err != nil || q.Value() < 1<<10 {
			return out, fmt.Errorf("podhub.yaml: updates.chunkRate %q: want a rate of at least 1Ki (bytes a second: 4Mi)", cfg.Updates.ChunkRate)
		}
		out.Rate = q.Value()
	}
	if out.Reads < 0 || out.Reads > 64 {
		return out, fmt.Errorf("podhub.yaml: updates.chunkReads %d: want 1 to 64", out.Reads)
	}
	return out, nil
}

func (c *cli) pkiDir() string { return c.path("pki") }

// init makes the hub's signing key (hub.key; hub.pub goes to devices),
// the broker's CA with the broker's and the hub's certificates (pki/),
// and a config with the defaults. Run again, it adds what is missing.
func (c *cli) init(args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	names := fs.String("broker-name", "", "host names or addresses devices use to reach the embedded broker, comma separated (its certificate also has localhost, the loopback addresses and this host's name)")
	if _, err := flags(fs, args); err != nil {
		return err
	}
	if err := prepareDataDir(c.dataDir, true); err != nil {
		return err
	}
	var created []string
	if _, err := os.Stat(c.path("hub.key")); errors.Is(err, os.ErrNotExist) {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		if err := writeFileMode(c.path("hub.key"), protocol.EncodePrivateKey(priv), 0o600); err != nil {
			return err
		}
		if err := writeFileMode(c.path("hub.pub"), protocol.EncodePublicKey(pub), 0o644); err != nil {
			return err
		}
		created = append(created, c.path("hub.key"), c.path("hub.pub"))
	}
	brokerNames := []string{}
	if host, err := os.Hostname(); err == nil && host != "" {
		brokerNames = append(brokerNames, host)
	}
	for _, n := range strings.Split(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			brokerNames = append(brokerNames, n)
		}
	}
	made, err := pki.Init(c.pkiDir(), brokerNames)
	if err != nil {
		return err
	}
	created = append(created, made...)
	if made, err := c.initSecretsKey(); err != nil {
		return err
	} else if made != "" {
		created = append(created, made)
	}
	cfg := "# podhub serve's settings; its flags override them.\n" +
		"# The embedded broker speaks TLS and admits only certificates from pki/ca.pem;\n" +
		"# listen on a public address (\"0.0.0.0:8883\") for devices on other hosts.\n" +
		"mqttListen: \"" + defaultListen + "\"   # or broker: mqtts://HOST:PORT for an external one\n" +
		"deviceTimeout: 90s     # a device silent this long is NotReady\n" +
		"memoryLimit: auto      # soft memory limit: auto (16Mi + 24Ki per connected device), off, or a size (512Mi)\n" +
		"# store: postgres://podhub@db.example.com/fleet   # the fleet store: PostgreSQL, or an SQLite file (default <data-dir>/fleet.db)\n" +
		"# secretsKeyFile: /path/secrets.key   # the key Secrets are sealed with in fleet.db (default <data-dir>/secrets.key)\n" +
		"updates:\n" +
		"  chunkRate: 4Mi        # each device's artifact transfer rate, bytes a second (podhub update)\n" +
		"  chunkReads: 4         # artifact reads under way at once\n" +
		"objects:\n" +
		"  maxObjects: 256       # ConfigMaps and Secrets one device is given at most\n" +
		"  maxBytes: 16Mi        # and their data at most\n" +
		"# The HTTPS listener of the dashboard, /metrics and the Kubernetes API (off unless listen is set;\n" +
		"# every path but /healthz, /livez, /readyz needs a login: podhub token create, podhub user add):\n" +
		"# http:\n" +
		"#   listen: \"0.0.0.0:8443\"\n" +
		"#   names: [hub.example.com]           # more names for pki/http.crt (issued by pki/ca.pem)\n" +
		"#   certFile: /path/tls.crt            # or the operator's certificate and key\n" +
		"#   keyFile: /path/tls.key\n"
	if _, err := os.Stat(c.path("podhub.yaml")); errors.Is(err, os.ErrNotExist) {
		if err := writeFileMode(c.path("podhub.yaml"), []byte(cfg), 0o600); err != nil {
			return err
		}
		created = append(created, c.path("podhub.yaml"))
	}
	if len(created) == 0 {
		fmt.Fprintf(c.out, "%s is complete; nothing to do\n", c.dataDir)
		return nil
	}
	for _, f := range created {
		fmt.Fprintf(c.out, "wrote %s\n", f)
	}
	fmt.Fprintf(c.out, "keep hub.key and pki/*.key secret; give devices their credentials with: podhub device add ID\n")
	return nil
}

func (c *cli) loadConfig() (config, error) {
	cfg := config{MQTTListen: defaultListen, DeviceTimeout: "90s"}
	if data, err := os.ReadFile(c.path("podhub.yaml")); err == nil {
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", c.path("podhub.yaml"), err)
		}
	}
	return cfg, nil
}

func (c *cli) serve(ctx context.Context, args []string) error {
	cfg, deviceTimeout, err := c.serveConfig(args)
	if err != nil {
		return err
	}
	if err := prepareDataDir(c.dataDir, false); err != nil {
		return err
	}
	// The lock before anything else: a second serve must not touch the
	// first's socket, broker or database.
	unlock, err := lockInstance(c.path("podhub.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	// An SQLite store's own lock: one serve per file, whatever its
	// data directory.
	unlockStore, err := c.lockStore(cfg)
	if err != nil {
		return err
	}
	defer unlockStore()
	key, err := readPrivateKey(c.path("hub.key"))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.errOut, nil))
	memLimit, err := parseMemoryLimit(cfg.MemoryLimit)
	if err != nil {
		return err
	}
	chunkCfg, err := cfg.chunkConfig()
	if err != nil {
		return err
	}
	objLimits, err := cfg.objectLimits()
	if err != nil {
		return err
	}
	hcfg := hub.Config{Prefix: cfg.Prefix, Key: key, Username: cfg.Username, DeviceTimeout: deviceTimeout,
		ReleaseDir: c.path("releases"), Chunks: chunkCfg, ObjectLimits: objLimits}
	// The link's counters, for /metrics (counted whether or not it is served).
	counters := hubmetrics.NewCounters()
	handled := &linkCounts{next: counters}
	hcfg.Observe = handled
	b, err := c.reachBroker(cfg, &hcfg, log)
	if err != nil {
		return err
	}
	var clients func() int
	if b != nil {
		clients = b.Clients
		defer func() {
			if err := b.Close(); err != nil {
				log.Warn("stopping the embedded broker", "err", err)
			}
		}()
	}
	stopLimit := make(chan struct{})
	defer close(stopLimit)
	applyMemoryLimit(memLimit, clients, stopLimit)
	fleet, err := c.openFleet(cfg)
	if err != nil {
		return err
	}
	defer fleet.Close()
	log.Info("fleet store", "store", storeName(c.storeOf(cfg)))
	if err := c.replicaClient(cfg, fleet, &hcfg, b != nil); err != nil {
		return err
	}
	h := hub.New(hcfg, fleet, log)
	if err := c.loadSecretsKey(cfg, h.Objects(), log); err != nil {
		return err
	}
	// One replica among those on the store: its leader work waits for
	// the leader lease. At a stop, the leader work stops (a pass running
	// ends) and then the lease is handed over, before the rest of the
	// hub closes, so another replica takes over at once and never beside
	// this one's passes.
	rep, unlockDir, err := c.startReplica(cfg, fleet, h, log)
	if err != nil {
		return err
	}
	stopReplica := sync.OnceFunc(func() {
		h.StopLeading()
		if err := rep.Stop(); err != nil {
			log.Warn("leaving the replicas", "err", err)
		}
		unlockDir()
	})
	defer stopReplica()
	if err := h.Start(10 * time.Second); err != nil {
		return fmt.Errorf("broker %s: %w", strings.Join(append([]string{hcfg.Broker}, hcfg.Brokers...), ","), err)
	}
	defer h.Close()
	defer stopReplica()
	gw, gwDone, err := c.startGateway(cfg, fleet, h, counters, deviceTimeout, readyChecks(fleet, h, rep), log)
	if err != nil {
		return err
	}
	gwErr := make(chan error, 1)
	if gw != nil {
		go func() { gwErr <- gw.Serve() }()
		defer func() {
			gw.Close()
			<-gwErr
			gwDone()
		}()
	}
	if cfg.HealthListen != "" {
		stopHealth, err := serveHealth(cfg.HealthListen, readyChecks(fleet, h, rep), log)
		if err != nil {
			return err
		}
		defer stopHealth()
	}
	mux := http.NewServeMux()
	mux.Handle("/", h.API(deviceTimeout).Handler())
	handleDebug(mux)
	handleReplicas(mux, fleet)
	handleReplicaSelf(mux, rep, h, handled)
	mux.HandleFunc("POST /v1/broker/revocations", func(w http.ResponseWriter, r *http.Request) {
		// The fleet's revocations and enrolments first: whatever the
		// broker, a revoked device gets no objects.
		if err := h.ObjectLink.Refresh(); err != nil {
			log.Error("reading the revoked devices", "err", err)
		}
		out, err := c.reloadRevocations(b, log)
		replyJSON(w, out, err)
	})
	log.Info("podhub serving", "broker", strings.Join(append([]string{hcfg.Broker}, hcfg.Brokers...), ","), "api", c.path("podhub.sock"), "data", c.dataDir)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		// The HTTPS listener failing stops serve, as the socket's would.
		select {
		case err := <-gwErr:
			gwErr <- err
			cancel(fmt.Errorf("HTTPS listener: %w", err))
		case <-ctx.Done():
		}
	}()
	if err := serveUnix(ctx, c.path("podhub.sock"), mux); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// serveConfig is podhub.yaml with serve's flags over it, and the device
// timeout it says.
func (c *cli) serveConfig(args []string) (config, time.Duration, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return cfg, 0, err
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("mqtt-listen", "", "the embedded broker's address (default "+defaultListen+"; TLS with client certificates)")
	brokerURL := fs.String("broker", "", "an external broker, mqtt://HOST:PORT or mqtts://HOST:PORT (several nodes of one cluster: separated by commas), instead of the embedded one")
	timeout := fs.String("device-timeout", "", "a device silent this long is NotReady (default 90s)")
	httpListen := fs.String("http-listen", "", "the HTTPS listener of the dashboard, /metrics and the Kubernetes API, HOST:PORT (default: http.listen of podhub.yaml, else none; a login is always required)")
	store := fs.String("store", "", "the fleet store: postgres://USER@HOST/DB (PostgreSQL; the password from PGPASSFILE or ~/.pgpass), sqlite:PATH or a path (default: store of podhub.yaml, else <data-dir>/fleet.db)")
	replicaID := fs.String("replica-id", "", "this podhub's name among the replicas on its store: lowercase letters, digits, '-' and '.' (default: kept in <data-dir>/replica-id, this host's name and a random suffix)")
	healthListen := fs.String("health-listen", "", "a plain HTTP listener of /livez, /readyz and /healthz only, HOST:PORT, for probes (default: healthListen of podhub.yaml, else none)")
	leaderLease := fs.String("leader-lease", "", "the leader lease's TTL, renewed every third of it (default 15s; from 3s to 10m)")
	memoryLimitFlag := fs.String("memory-limit", "", "podhub's soft memory limit: auto (16Mi + 24Ki per connected device, at least 9/8 of what no collection frees; 24Mi more while it allocates fast), off, or a size such as 512Mi (default auto)")
	if _, err := flags(fs, args); err != nil {
		return cfg, 0, err
	}
	if *listen != "" {
		cfg.MQTTListen, cfg.Broker, cfg.Brokers = *listen, "", nil
	}
	if *brokerURL != "" {
		cfg.Broker, cfg.Brokers = *brokerURL, nil
	}
	if _, err := cfg.brokers(); err != nil {
		return cfg, 0, err
	}
	if *timeout != "" {
		cfg.DeviceTimeout = *timeout
	}
	if *memoryLimitFlag != "" {
		cfg.MemoryLimit = *memoryLimitFlag
	}
	if *store != "" {
		cfg.Store = *store
	}
	if *replicaID != "" {
		cfg.ReplicaID = *replicaID
	}
	if *leaderLease != "" {
		cfg.LeaderLease = *leaderLease
	}
	if *healthListen != "" {
		cfg.HealthListen = *healthListen
	}
	if *httpListen != "" {
		cfg.HTTP.Listen = *httpListen
	}
	if err := cfg.HTTP.check(); err != nil {
		return cfg, 0, err
	}
	deviceTimeout, err := time.ParseDuration(cfg.DeviceTimeout)
	if err != nil || deviceTimeout <= 0 {
		return cfg, 0, fmt.Errorf("device timeout %q: want a positive duration", cfg.DeviceTimeout)
	}
	return cfg, deviceTimeout, nil
}

// reachBroker sets how the hub reaches its broker: the embedded one,
// started here (returned, for the caller to close), or the external one
// of the config, with its password and TLS.
func (c *cli) reachBroker(cfg config, hcfg *hub.Config, log *slog.Logger) (*broker.Broker, error) {
	urls, err := cfg.brokers()
	if err != nil {
		return nil, err
	}
	if len(urls) == 0 {
		b, err := c.startBroker(cfg, log)
		if err != nil {
			return nil, err
		}
		hcfg.Broker, hcfg.Connect = "embedded", b.HubClient
		log.Info("embedded MQTT broker listening (TLS, client certificates)", "address", cfg.MQTTListen)
		return b, nil
	}
	hcfg.Broker, hcfg.Brokers = urls[0], urls[1:]
	if cfg.PasswordFile != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		hcfg.Password = strings.TrimSpace(string(pw))
	}
	if strings.HasPrefix(hcfg.Broker, "mqtts://") {
		certFile, keyFile, caFile := cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.CA
		if certFile == "" && keyFile == "" {
			// The hub's certificate from podhub init.
			certFile, keyFile = filepath.Join(c.pkiDir(), pki.HubCert), filepath.Join(c.pkiDir(), pki.HubKey)
		}
		if hcfg.TLS, err = tlsconfig.Client(caFile, certFile, keyFile, ""); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// startBroker starts the embedded broker with the CA's certificates and
// revocation list.
func (c *cli) startBroker(cfg config, log *slog.Logger) (*broker.Broker, error) {
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return nil, err
	}
	t, err := broker.ServerTLS(filepath.Join(c.pkiDir(), pki.BrokerCert), filepath.Join(c.pkiDir(), pki.BrokerKey), ca)
	if err != nil {
		return nil, err
	}
	revoked, err := ca.Revoked()
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Config{Address: cfg.MQTTListen, TLS: t, Revoked: revoked, Prefix: cfg.Prefix, Log: log})
}

// Revocations is the reply to a reload of the revocation list.
type Revocations struct {
	Revoked      int      `json:"revoked"`
	Disconnected []string `json:"disconnected"`
}

// reloadRevocations reads the CRL again and disconnects the clients it
// revokes (podhub device revoke calls it).
func (c *cli) reloadRevocations(b *broker.Broker, log *slog.Logger) (Revocations, error) {
	if b == nil {
		return Revocations{}, errors.New("podhub uses an external broker: that broker enforces the revocation list (" + filepath.Join(c.pkiDir(), pki.CRLFile) + ")")
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return Revocations{}, err
	}
	set, err := ca.Revoked()
	if err != nil {
		return Revocations{}, err
	}
	out := Revocations{Revoked: len(set), Disconnected: b.SetRevoked(set)}
	log.Info("revocation list reloaded", "revoked", out.Revoked, "disconnected", out.Disconnected)
	return out, nil
}

// serveUnix serves the API on a socket only the owner and group reach.
// The caller holds the instance lock, so a stale socket is ours to
// replace.
func serveUnix(ctx context.Context, path string, h http.Handler) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("API socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("API socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return fmt.Errorf("API socket: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hub key (run podhub init first): %w", err)
	}
	priv, err := protocol.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("hub key %s: %w", path, err)
	}
	return priv, nil
}
