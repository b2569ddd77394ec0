package devicelink

import (
	"encoding/json"
	"fmt"
	"sync"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/hub/chunks"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/protocol"
)

// orders is the link's side of updates: each device's newest order,
// signed, stored and published retained on its update topic, and what
// the chunk server may send it (the transfer hashes of that order).
type orders struct {
	// mu serialises making orders (IDs grow per device) with a
	// reconnect's publishing of every stored one.
	mu sync.Mutex
	// allowed caches each device's current order for the chunk server.
	allowed sync.Map // device -> *allowedOrder
	// cache serialises filling allowed with dropping from it; gen counts
	// the drops, so that a fill whose read an order overtook is not kept
	// (the device would go on reading the replaced or withdrawn release).
	cache sync.Mutex
	gen   uint64
}

// forget drops device's cached order (a new one is stored).
func (o *orders) forget(device string) {
	o.cache.Lock()
	o.gen++
	o.allowed.Delete(device)
	o.cache.Unlock()
}

type allowedOrder struct {
	id   int64
	blob map[string]int64 // transfer sha -> size
}

// Order signs, stores and publishes device's next order for update,
// carrying the signed release manifest (implements updates.Publisher).
func (h *Link) Order(device, update string, release []byte, allowDowngrade bool) (int64, error) {
	return h.publishOrder(device, update, release, allowDowngrade)
}

// Withdraw publishes an order without a release: the device starts
// nothing more (an install under way finishes or fails on its own).
func (h *Link) Withdraw(device string) error {
	_, err := h.publishOrder(device, "", nil, false)
	return err
}

func (h *Link) publishOrder(device, update string, release []byte, allowDowngrade bool) (int64, error) {
	h.orders.mu.Lock()
	defer h.orders.mu.Unlock()
	id, err := h.fleet.NextOrderID(device)
	if err != nil {
		return 0, err
	}
	doc, err := protocol.SignOrder(protocol.Order{Device: device, ID: id, Release: release, AllowDowngrade: allowDowngrade}, h.cfg.Key)
	if err != nil {
		return 0, err
	}
	if len(doc) > protocol.MaxMessageBytes {
		return 0, fmt.Errorf("device %s: the update order would be %d bytes, over the %d byte limit", device, len(doc), protocol.MaxMessageBytes)
	}
	// Stored first: a hub that dies here publishes it at its next start,
	// and never makes another order with this ID.
	if err := h.fleet.SaveOrder(fleetdb.Order{Device: device, ID: id, Update: update, Document: doc, At: h.now()}); err != nil {
		return 0, err
	}
	h.orders.forget(device)
	h.client.Publish(h.topics.Device(device, protocol.KindUpdate), 1, true, doc)
	return id, nil
}

// publishOrders publishes every stored order again (at connect).
func (h *Link) publishOrders(c mqtt.Client) int {
	h.orders.mu.Lock()
	defer h.orders.mu.Unlock()
	os, err := h.fleet.AllOrders()
	if err != nil {
		h.log.Error("reading update orders", "err", err)
		return 0
	}
	n := 0
	for _, o := range os {
		if h.owns(o.Device) {
			c.Publish(h.topics.Device(o.Device, protocol.KindUpdate), 1, true, o.Document)
			n++
		}
	}
	return n
}

// Resolve is the chunk server's check of a fetch: only an artifact of
// the device's current order, by its transfer hash (chunks.Source).
func (h *Link) Resolve(device string, order int64, sha string) (string, int64, error) {
	a, err := h.allowedOrder(device)
	if err != nil {
		return "", 0, err
	}
	if a.id == 0 || order != a.id {
		return "", 0, fmt.Errorf("order %d is not this device's current order (%d)", order, a.id)
	}
	size, ok := a.blob[sha]
	if !ok {
		return "", 0, fmt.Errorf("%s: %w %d", sha, chunks.ErrNotOrdered, order)
	}
	return h.releases.Path(sha), size, nil
}

func (h *Link) allowedOrder(device string) (*allowedOrder, error) {
	for {
		if a, ok := h.orders.allowed.Load(device); ok {
			return a.(*allowedOrder), nil
		}
		h.orders.cache.Lock()
		gen := h.orders.gen
		h.orders.cache.Unlock()
		a, err := h.readOrder(device)
		if err != nil {
			return nil, err
		}
		h.orders.cache.Lock()
		if h.orders.gen == gen {
			h.orders.allowed.Store(device, a)
			h.orders.cache.Unlock()
			return a, nil
		}
		h.orders.cache.Unlock() // an order was made meanwhile: read again
	}
}

// readOrder reads device's current order and the transfer hashes it
// allows.
func (h *Link) readOrder(device string) (*allowedOrder, error) {
	o, err := h.fleet.DeviceOrder(device)
	if err != nil {
		return nil, err
	}
	afterOrderRead()
	a := &allowedOrder{id: o.ID, blob: map[string]int64{}}
	if o.ID > 0 {
		var env protocol.SignedDoc
		var order protocol.Order
		if err := json.Unmarshal(o.Document, &env); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(env.Doc, &order); err != nil {
			return nil, err
		}
		if len(order.Release) > 0 {
			rel, err := releases.Decode(order.Release)
			if err != nil {
				return nil, err
			}
			for _, art := range rel.Artifacts {
				sha, size := art.Transfer()
				a.blob[sha] = size
			}
		} else {
			a.id = 0 // withdrawn: nothing to fetch
		}
	}
	return a, nil
}

// afterOrderRead is called between the read of a device's order and the
// cache's fill (a test makes an order there).
var afterOrderRead = func() {}

// saveUpdateState stores a device's update report and asks the update
// controller for a pass when it changed.
func (h *Link) saveUpdateState(dev string, s *protocol.UpdateState) error {
	changed, err := h.fleet.SaveUpdateState(s, h.now())
	if err == nil && changed {
		h.cfg.UpdateChanged()
	}
	return err
}

// fetchHandler hands a device's fetch to the chunk server (which answers
// on the device's chunk topic, refusals included).
func (h *Link) fetchHandler(_ mqtt.Client, m mqtt.Message) {
	dev, ok := h.device(m)
	if !ok || len(m.Payload()) == 0 || h.chunks == nil {
		return
	}
	h.chunks.Fetch(dev, m.Payload())
}

// sendChunk publishes a chunk frame (not retained) on device's chunk
// topic, at QoS 0: at QoS 1 the MQTT client keeps each frame until the
// broker acknowledges it, and a broker that never does (forging fetches
// meanwhile) would grow the hub's memory without bound. A lost chunk is
// asked for again by the device.
func (h *Link) sendChunk(device string, frame []byte) {
	h.client.Publish(h.topics.Device(device, protocol.KindChunk), 0, false, frame)
}

// ChunkBytes is the artifact bytes the chunk server has sent.
func (h *Link) ChunkBytes() int64 {
	if h.chunks == nil {
		return 0
	}
	return h.chunks.Sent()
}
