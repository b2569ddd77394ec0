package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Ack is a device's answer to a desired document, retained so that a
// hub that restarts learns it again. It is sent only once the document
// is stored on the device.
type Ack struct {
	Schema int    `json:"schema"`
	Device string `json:"device"`
	// Generation is the document answered.
	Generation int64 `json:"generation"`
	// ObservedGeneration is the newest generation the device has applied:
	// Generation, or an older one when the document was refused whole.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Error says why the whole document was refused (bad signature,
	// stale generation, malformed); then Pods is empty.
	Error string      `json:"error,omitempty"`
	Pods  []PodResult `json:"pods,omitempty"`
}

// StatusBatch carries a device's outbox items in sequence order. Seq
// numbers grow within an epoch, which names one outbox database: a device
// whose database was recreated starts a new epoch, and the hub a new
// sequence for it.
type StatusBatch struct {
	Schema int    `json:"schema"`
	Device string `json:"device"`
	Epoch  string `json:"epoch"`
	// After is the sequence number the batch follows; the items are
	// numbered After+1, After+2, ... with no gap. A hub whose cursor is
	// below After has missed a batch, stores nothing and asks for a
	// resend. A new epoch starts at After 0.
	After int64        `json:"after"`
	Items []StatusItem `json:"items"`
}

// StatusItem is one outbox item: the newest mirror of a pod (nil Pod:
// the pod is gone from the device), or an event.
type StatusItem struct {
	Seq   int64   `json:"seq"`
	Key   string  `json:"key"` // namespace/name of the pod
	Pod   *v1.Pod `json:"pod,omitempty"`
	Event *Event  `json:"event,omitempty"`
}

// Event is a pod event worth seeing from the fleet: a kill, an eviction,
// a refused pod.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"` // Normal or Warning
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// StatusAck is the hub's receipt: every item of the epoch up to Seq is
// stored, and the device may forget it.
type StatusAck struct {
	Schema int    `json:"schema"`
	Epoch  string `json:"epoch"`
	Seq    int64  `json:"seq"`
	// Resend asks for everything after Seq again: a batch arrived after
	// a gap (one was lost, or reordered across a reconnect).
	Resend bool `json:"resend,omitempty"`
	// Beat echoes the Beat of the heartbeat this receipt answers (0 for
	// a receipt of a status batch): the device renews its self-fencing
	// leases from that heartbeat's send time, which the hub's "last
	// heard" can only follow.
	Beat uint64 `json:"beat,omitempty"`
}

// Heartbeat is a device's node status, sent periodically and at connect.
type Heartbeat struct {
	Schema  int       `json:"schema"`
	Device  string    `json:"device"`
	Time    time.Time `json:"time"`
	Version string    `json:"version"`
	// Labels are the device's own: the hub keeps only those under
	// DeviceLabelPrefix.
	Labels map[string]string `json:"labels,omitempty"`
	Node   v1.NodeStatus     `json:"node"`
	// Instance names one installation of the daemon (made once, kept in
	// its data directory): two instances alternating under one device ID
	// are two devices sharing it.
	Instance string `json:"instance,omitempty"`
	// Net is the pods' network traffic, when the device counts it.
	Net *NetSummary `json:"net,omitempty"`
	// Beat numbers this heartbeat within one run of the device's agent
	// (from a random start, so that a receipt from an earlier run never
	// matches); the hub echoes it in its receipt (StatusAck.Beat).
	Beat uint64 `json:"beat,omitempty"`
	// Metrics is the summary of the device's metrics, when it keeps them.
	Metrics *MetricsSnapshot `json:"metrics,omitempty"`
}

// DeviceLabelPrefix is the one label namespace a device may set on
// itself, as a kubelet may set only some labels on its Node
// (NodeRestriction): the hub drops the others, so a device cannot steer
// what a selector sends where.
const DeviceLabelPrefix = "device.podvisor.io/"

// Presence says whether a device is connected. The device publishes
// online at connect; the broker publishes its last will, offline, when
// the connection is lost without a goodbye.
type Presence struct {
	Schema int    `json:"schema"`
	Device string `json:"device,omitempty"` // empty for the hub
	Online bool   `json:"online"`
	// Session changes with every connection of the hub.
	Session string `json:"session,omitempty"`
	// Instance is the device's, as in Heartbeat.
	Instance string `json:"instance,omitempty"`
}

// Encode writes any document of this package with the current schema.
func Encode(v any) []byte {
	switch m := v.(type) {
	case *Ack:
		m.Schema = Schema
	case *StatusBatch:
		m.Schema = Schema
	case *StatusAck:
		m.Schema = Schema
	case *Heartbeat:
		m.Schema = Schema
	case *Presence:
		m.Schema = Schema
	case *UpdateState:
		m.Schema = Schema
	case *Fetch:
		m.Schema = Schema
	default:
		panic(fmt.Sprintf("protocol.Encode: %T is not a protocol document", v))
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("protocol.Encode %T: %v", v, err)) // these types always marshal
	}
	return b
}

// decodeDoc decodes one small document of type T strictly.
func decodeDoc[T any](what string, data []byte, schemaOf func(*T) int) (*T, error) {
	v := new(T)
	if err := decodeStrict(what, data, MaxMessageBytes, v, func() int { return schemaOf(v) }); err != nil {
		return nil, err
	}
	return v, nil
}

// DecodeAck decodes a device's ack strictly.
func DecodeAck(data []byte) (*Ack, error) {
	return decodeDoc("ack", data, func(a *Ack) int { return a.Schema })
}

// DecodeStatusBatch decodes a status batch strictly and checks that its
// sequence numbers grow and every item is a pod or an event.
func DecodeStatusBatch(data []byte) (*StatusBatch, error) {
	b, err := decodeDoc("status batch", data, func(b *StatusBatch) int { return b.Schema })
	if err != nil {
		return nil, err
	}
	if b.Epoch == "" {
		return nil, fmt.Errorf("status batch: no epoch")
	}
	if len(b.Items) > MaxBatch {
		return nil, fmt.Errorf("status batch: %d items, over the limit of %d", len(b.Items), MaxBatch)
	}
	if b.After < 0 {
		return nil, fmt.Errorf("status batch: after %d is negative", b.After)
	}
	for i, it := range b.Items {
		// Numbers on the wire have no gaps: a jump is a forgery or a bug,
		// never a cursor to follow.
		if want := b.After + int64(i) + 1; it.Seq != want {
			return nil, fmt.Errorf("status batch: items[%d].seq %d, want %d (sequence numbers follow after with no gap)", i, it.Seq, want)
		}
		if it.Key == "" {
			return nil, fmt.Errorf("status batch: items[%d].key is empty", i)
		}
		if it.Pod != nil && it.Event != nil {
			return nil, fmt.Errorf("status batch: items[%d] is both a pod and an event", i)
		}
	}
	return b, nil
}

// DecodeStatusAck decodes the hub's receipt strictly.
func DecodeStatusAck(data []byte) (*StatusAck, error) {
	return decodeDoc("status ack", data, func(a *StatusAck) int { return a.Schema })
}

// DecodeHeartbeat decodes a heartbeat strictly and bounds the resources
// it claims (validateNodeResources).
func DecodeHeartbeat(data []byte) (*Heartbeat, error) {
	h, err := decodeDoc("heartbeat", data, func(h *Heartbeat) int { return h.Schema })
	if err != nil {
		return nil, err
	}
	if err := validateNodeResources(&h.Node); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	if h.Net != nil {
		if err := h.Net.Validate(); err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
	}
	if h.Metrics != nil {
		if err := h.Metrics.Validate(); err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
	}
	return h, nil
}

// DecodePresence decodes a presence document strictly.
func DecodePresence(data []byte) (*Presence, error) {
	return decodeDoc("presence", data, func(p *Presence) int { return p.Schema })
}
