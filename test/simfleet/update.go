package simfleet

import (
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// UpdateConfig is how a simulated device acts on update orders.
type UpdateConfig struct {
	// Arch is the architecture its heartbeat reports (GOARCH) and whose
	// artifacts it fetches (default amd64).
	Arch    string
	Version string // running at start (default v1.0.0)
	// Heartbeat is the period of its heartbeats (default 2 s).
	Heartbeat time.Duration
	// ReleaseKey checks release manifests (default the hub's key).
	ReleaseKey ed25519.PublicKey
	// Fail says why the device rolls back an order of a release, after
	// downloading and checking it ("" installs it).
	Fail func(r *protocol.Release) string
	// Window is the fetches it keeps under way (default 4).
	Window int
	// Busy is called true when the device takes an order and false once
	// it has reported its outcome (and, committed, its new version).
	Busy func(id string, busy bool)
	Log  *slog.Logger
}

// UpdateDevice is a simulated device that updates itself as a real one
// does, apart from running anything: it opens the newest order with the
// hub's key and its release with the release key, fetches every
// artifact of its architecture chunk by chunk through the broker
// (really moved, each checked against its wire and decoded size and
// hash), reports Downloading with percent, then Committed and heartbeats
// with the new version; or RolledBack with the reason Fail gives.
//
// It is its own MQTT client, apart from the uplink agent (one client ID
// per device): it heartbeats and says its presence itself, and has no
// pods.
type UpdateDevice struct {
	ID  string
	cfg UpdateConfig
	d   Device
	top protocol.Topics
	c   mqtt.Client

	mu      sync.Mutex
	running string
	acted   int64 // the newest order acted on
	orders  chan *protocol.Order
	chunks  chan chunkMsg
	stop    chan struct{}
	done    sync.WaitGroup

	// Received is the artifact bytes received; Ordered the orders with a
	// release taken.
	Received atomic.Int64
	Ordered  atomic.Int64
}

type chunkMsg struct {
	c    *protocol.Chunk
	data []byte
}

// UpdateDevice makes a simulated updating device with d's credentials.
func (d Device) UpdateDevice(cfg UpdateConfig) *UpdateDevice {
	if cfg.Arch == "" {
		cfg.Arch = "amd64"
	}
	if cfg.Version == "" {
		cfg.Version = "v1.0.0"
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.ReleaseKey == nil {
		cfg.ReleaseKey = d.e.hubKey
	}
	if cfg.Window <= 0 {
		cfg.Window = 4
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &UpdateDevice{ID: d.ID, cfg: cfg, d: d, running: cfg.Version,
		orders: make(chan *protocol.Order, 1), chunks: make(chan chunkMsg, 64), stop: make(chan struct{})}
}

// Running is the version it runs.
func (u *UpdateDevice) Running() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.running
}

// Start connects and starts heartbeating and acting on orders.
func (u *UpdateDevice) Start() error {
	presence := func(online bool) []byte {
		return protocol.Encode(&protocol.Presence{Device: u.ID, Online: online})
	}
	opts := mqtt.NewClientOptions().AddBroker(u.d.e.broker).SetClientID(u.ID).SetTLSConfig(u.d.tc).
		SetCleanSession(true).SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(time.Second).
		SetBinaryWill(u.top.Device(u.ID, protocol.KindPresence), presence(false), 1, true).
		SetOnConnectHandler(func(c mqtt.Client) {
			c.Subscribe(u.top.Device(u.ID, protocol.KindUpdate), 1, u.onOrder)
			c.Subscribe(u.top.Device(u.ID, protocol.KindChunk), 1, u.onChunk)
			c.Publish(u.top.Device(u.ID, protocol.KindPresence), 1, true, presence(true))
			u.heartbeat()
		})
	u.c = mqtt.NewClient(opts)
	if tok := u.c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		return fmt.Errorf("sim %s: connecting: %v", u.ID, tok.Error())
	}
	u.done.Add(2)
	go u.beat()
	go u.work()
	return nil
}

// Stop says goodbye (offline) and disconnects.
func (u *UpdateDevice) Stop() {
	select {
	case <-u.stop:
		return
	default:
	}
	close(u.stop)
	u.done.Wait()
	u.c.Publish(u.top.Device(u.ID, protocol.KindPresence), 1, true,
		protocol.Encode(&protocol.Presence{Device: u.ID, Online: false})).WaitTimeout(2 * time.Second)
	u.c.Disconnect(200)
}

func (u *UpdateDevice) beat() {
	defer u.done.Done()
	t := time.NewTicker(u.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			return
		case <-t.C:
			u.heartbeat()
		}
	}
}

func (u *UpdateDevice) heartbeat() {
	node := RoomyNode()
	node.Status.NodeInfo.Architecture = u.cfg.Arch
	hb := &protocol.Heartbeat{Device: u.ID, Time: time.Now(), Version: u.Running(), Node: node.Status}
	u.c.Publish(u.top.Device(u.ID, protocol.KindHeartbeat), 1, false, protocol.Encode(hb))
}

// onOrder keeps the newest order that opens (a stale or replayed one is
// ignored, as a device does).
func (u *UpdateDevice) onOrder(_ mqtt.Client, m mqtt.Message) {
	if len(m.Payload()) == 0 {
		return
	}
	o, err := protocol.OpenOrder(m.Payload(), u.ID, u.d.e.hubKey)
	if err != nil {
		u.cfg.Log.Warn("refused an update order", "device", u.ID, "err", err)
		return
	}
	u.mu.Lock()
	if o.ID <= u.acted {
		u.mu.Unlock()
		return
	}
	u.acted = o.ID
	u.mu.Unlock()
	select { // the newest replaces one not yet started
	case <-u.orders:
	default:
	}
	u.orders <- o
}

func (u *UpdateDevice) onChunk(_ mqtt.Client, m mqtt.Message) {
	c, data, err := protocol.DecodeChunk(m.Payload())
	if err != nil {
		u.cfg.Log.Warn("refused a chunk", "device", u.ID, "err", err)
		return
	}
	select {
	case u.chunks <- chunkMsg{c, append([]byte(nil), data...)}:
	default: // full: asked again on the timeout
	}
}

func (u *UpdateDevice) work() {
	defer u.done.Done()
	for {
		select {
		case <-u.stop:
			return
		case o := <-u.orders:
			if len(o.Release) == 0 {
				continue // withdrawn: nothing starts
			}
			u.act(o)
		}
	}
}

// act carries out one order and reports its outcome.
func (u *UpdateDevice) act(o *protocol.Order) {
	from := u.Running()
	state := func(phase string, pct int, reason, version string) {
		s := &protocol.UpdateState{Device: u.ID, Time: time.Now(), Order: o.ID, Kind: protocol.ReleaseAgent, Version: version,
			Phase: phase, Percent: pct, Reason: reason, Running: u.Running(), Previous: from}
		u.c.Publish(u.top.Device(u.ID, protocol.KindUpdateState), 1, true, protocol.Encode(s))
	}
	rel, err := protocol.OpenRelease(o.Release, u.cfg.ReleaseKey)
	if err != nil {
		state(protocol.UpdateFailed, 0, err.Error(), "")
		return
	}
	u.Ordered.Add(1)
	if u.cfg.Busy != nil {
		u.cfg.Busy(u.ID, true)
		defer u.cfg.Busy(u.ID, false)
	}
	if c, err := protocol.CompareVersions(from, rel.Version); err == nil && c > 0 && !o.AllowDowngrade {
		state(protocol.UpdateFailed, 0, fmt.Sprintf("refusing a downgrade from %s to %s", from, rel.Version), rel.Version)
		return
	}
	arts := rel.For(u.cfg.Arch)
	if len(arts) == 0 {
		state(protocol.UpdateFailed, 0, "the release has no binaries for "+u.cfg.Arch, rel.Version)
		return
	}
	var total, got int64
	for _, a := range arts {
		_, n := a.Transfer()
		total += n
	}
	state(protocol.UpdateDownloading, 0, "", rel.Version)
	lastPct := 0
	for _, a := range arts {
		err := u.fetch(o.ID, a, func(n int) {
			got += int64(n)
			if pct := int(got * 100 / total); pct >= lastPct+10 && pct < 100 {
				lastPct = pct
				state(protocol.UpdateDownloading, pct, "", rel.Version)
			}
		})
		if err != nil {
			state(protocol.UpdateFailed, 0, fmt.Sprintf("%s: %v", a.Name, err), rel.Version)
			return
		}
	}
	state(protocol.UpdateVerifying, 100, "", rel.Version)
	if reason := failReason(u.cfg.Fail, rel); reason != "" {
		state(protocol.UpdateRolledBack, 0, reason, rel.Version)
		return
	}
	state(protocol.UpdateRestarting, 0, "", rel.Version)
	u.mu.Lock()
	u.running = rel.Version
	u.mu.Unlock()
	state(protocol.UpdateCommitted, 100, "", rel.Version)
	u.heartbeat()
}

func failReason(f func(*protocol.Release) string, r *protocol.Release) string {
	if f == nil {
		return ""
	}
	return f(r)
}

// fetch moves one artifact with a window of fetches, in order, checking
// its wire size and hash, and its decoded ones.
func (u *UpdateDevice) fetch(order int64, a protocol.Artifact, progress func(int)) error {
	sha, size := a.Transfer()
	var decoded hash.Hash = sha256.New()
	var dsize int64
	var sink io.Writer = io.Discard
	var decodeErr chan error
	var pw *io.PipeWriter
	if a.Encoding == "gzip" {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		sink, decodeErr = pw, make(chan error, 1)
		go func() {
			zr, err := gzip.NewReader(pr)
			if err == nil {
				dsize, err = io.Copy(decoded, zr)
			}
			pr.CloseWithError(err)
			decodeErr <- err
		}()
		defer pw.Close()
	}
	wire := sha256.New()
	next := int64(0) // the next offset to consume
	asked := map[int64]time.Time{}
	have := map[int64][]byte{}
	ask := func(off int64) {
		n := min(int64(protocol.MaxChunkBytes), size-off)
		f := &protocol.Fetch{Order: order, SHA256: sha, Offset: off, Length: int(n)}
		u.c.Publish(u.top.Device(u.ID, protocol.KindFetch), 1, false, protocol.Encode(f))
		asked[off] = time.Now()
	}
	high := int64(0) // the next offset not yet asked for
	for next < size {
		for len(asked) < u.cfg.Window && high < size {
			ask(high)
			high += protocol.MaxChunkBytes
		}
		select {
		case <-u.stop:
			return errors.New("stopped")
		case m := <-u.chunks:
			c := m.c
			if _, waiting := asked[c.Offset]; c.Order != order || c.SHA256 != sha || !waiting {
				continue // an answer to an earlier order, or asked and answered twice
			}
			if c.Error != "" {
				if !strings.Contains(c.Error, "ask again") {
					return fmt.Errorf("the hub refused: %s", c.Error)
				}
				delete(asked, c.Offset)
				time.Sleep(100 * time.Millisecond)
				ask(c.Offset)
				continue
			}
			delete(asked, c.Offset)
			have[c.Offset] = m.data
		case <-time.After(5 * time.Second):
			for off := range asked { // lost: ask again
				ask(off)
			}
		}
		for data, ok := have[next]; ok; data, ok = have[next] {
			delete(have, next)
			want := min(int64(protocol.MaxChunkBytes), size-next)
			if int64(len(data)) != want {
				return fmt.Errorf("chunk at %d: %d bytes, want %d", next, len(data), want)
			}
			wire.Write(data)
			if _, err := sink.Write(data); err != nil {
				return fmt.Errorf("decoding: %w", err)
			}
			u.Received.Add(int64(len(data)))
			progress(len(data))
			next += int64(len(data))
		}
	}
	if got := hex.EncodeToString(wire.Sum(nil)); got != sha {
		return fmt.Errorf("the transfer hashes to %s, the manifest says %s", got, sha)
	}
	if a.Encoding == "" {
		return nil
	}
	pw.Close()
	if err := <-decodeErr; err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	if dsize != a.Size || hex.EncodeToString(decoded.Sum(nil)) != a.SHA256 {
		return fmt.Errorf("decoded to %d bytes hashing to %x, the manifest says %d, %s", dsize, decoded.Sum(nil), a.Size, a.SHA256)
	}
	return nil
}
