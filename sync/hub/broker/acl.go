package broker

import (
	"fmt"
	"strings"

	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Retained payload limits for what a device may keep on the broker: its
// last ack (per-pod verdicts: as large as any report) and its presence.
// Together with the ACL (two retained topics per device, each replacing
// the last) they bound the broker's retained memory per device.
const (
	MaxRetainedAckBytes      = protocol.MaxMessageBytes
	MaxRetainedPresenceBytes = 4 << 10
	// An update report (retained) is a phase, a percent, a reason of at
	// most 1 KiB and a few versions; a fetch names a hash, an offset and
	// a length.
	MaxRetainedUpdateStateBytes = protocol.MaxUpdateStateBytes
	MaxFetchBytes               = 1 << 10
	// A device asks for the objects it lacks (never retained) and keeps
	// its public sealing key retained (1216 bytes, base64 in JSON).
	MaxObjectGetBytes       = 16 << 10
	MaxRetainedSealKeyBytes = 4 << 10
	// A device streams a pod's log in frames of a header and at most
	// 16 KiB of text (never retained).
	MaxLogsFrameBytes = protocol.MaxLogsFrameBytes
)

// ACL decides what each authenticated identity may do on the topic
// tree; the embedded broker enforces it, and packaging/mosquitto/acl is
// the same rules for Mosquitto. The identity is the client certificate's
// common name: pki.HubIdentity for the hub, the device ID for a device,
// and the MQTT client ID must equal it.
//
// A device may publish only its reports (ack, status, heartbeat,
// presence, update-state, fetch, object-get, seal-key, logs; only ack,
// presence, update-state and seal-key retained) and subscribe to, or be
// sent, only its desired document, its status receipts, its update
// order, its artifact chunks, its object index and objects, its log
// requests, and the hub's presence.
// The hub may do anything under the prefix. Nobody may use wildcards
// except the hub, nor topics outside the prefix.
type ACL struct{ Topics protocol.Topics }

// CheckIdentity refuses an identity that is neither the hub's nor a valid
// device ID, and a client ID that is not the identity (which would take
// over another client's session). The hub may also be a replica, under
// client ID "podhub:<replica ID>" (replica.CheckID): ':' is outside the
// device IDs' alphabet, so no device can take it.
func (a ACL) CheckIdentity(identity, clientID string) error {
	if identity == pki.HubIdentity {
		if id, ok := strings.CutPrefix(clientID, pki.HubIdentity+":"); ok {
			if err := replica.CheckID(id); err != nil {
				return fmt.Errorf("client ID %q: a replica of the hub: %w", clientID, err)
			}
			return nil
		}
	}
	if identity != pki.HubIdentity {
		if err := protocol.ValidDeviceID(identity); err != nil {
			return fmt.Errorf("certificate common name: %w", err)
		}
		if pki.Reserved(identity) {
			return fmt.Errorf("certificate common name %q: reserved", identity)
		}
	}
	if clientID != identity {
		return fmt.Errorf("client ID %q: must equal the certificate's common name %q", clientID, identity)
	}
	return nil
}

// CheckPublish decides whether identity may publish size bytes on topic,
// retained or not.
func (a ACL) CheckPublish(identity, topic string, retain bool, size int) error {
	if identity == pki.HubIdentity {
		if !a.underPrefix(topic) {
			return fmt.Errorf("topic %q: outside %s", topic, a.root())
		}
		return nil
	}
	kind, ok := a.ownKind(identity, topic)
	if !ok {
		return fmt.Errorf("device %s may not publish on topic %q", identity, topic)
	}
	limit := protocol.MaxMessageBytes
	switch kind {
	case protocol.KindStatus, protocol.KindHeartbeat, protocol.KindFetch, protocol.KindObjectGet, protocol.KindLogs:
		if retain {
			return fmt.Errorf("device %s may not retain messages on topic %q", identity, topic)
		}
		switch kind {
		case protocol.KindFetch:
			limit = MaxFetchBytes
		case protocol.KindObjectGet:
			limit = MaxObjectGetBytes
		case protocol.KindLogs:
			limit = MaxLogsFrameBytes
		}
	case protocol.KindSealKey:
		limit = MaxRetainedSealKeyBytes
	case protocol.KindUpdateState:
		limit = MaxRetainedUpdateStateBytes
	case protocol.KindAck:
		limit = MaxRetainedAckBytes
	case protocol.KindPresence:
		limit = MaxRetainedPresenceBytes
	default:
		return fmt.Errorf("device %s may not publish on topic %q", identity, topic)
	}
	if size > limit {
		return fmt.Errorf("topic %q: %d bytes, over the %d byte limit", topic, size, limit)
	}
	return nil
}

// CheckRead decides whether identity may subscribe to filter, or be sent
// a message on the topic filter names.
func (a ACL) CheckRead(identity, filter string) error {
	if identity == pki.HubIdentity {
		if !a.underPrefix(filter) {
			return fmt.Errorf("filter %q: outside %s", filter, a.root())
		}
		return nil
	}
	switch filter {
	case a.Topics.Device(identity, protocol.KindDesired), a.Topics.Device(identity, protocol.KindStatusAck), a.Topics.HubPresence(),
		a.Topics.Device(identity, protocol.KindUpdate), a.Topics.Device(identity, protocol.KindChunk),
		a.Topics.Device(identity, protocol.KindObjects), a.Topics.Device(identity, protocol.KindObject),
		a.Topics.Device(identity, protocol.KindLogsRequest):
		return nil
	}
	return fmt.Errorf("device %s may not read topic %q", identity, filter)
}

// ownKind is the kind of a topic under the identity's own device topics.
func (a ACL) ownKind(identity, topic string) (string, bool) {
	rest, ok := strings.CutPrefix(topic, a.Topics.Device(identity, ""))
	if !ok || rest == "" || strings.ContainsAny(rest, "/+#") {
		return "", false
	}
	return rest, true
}

func (a ACL) underPrefix(topic string) bool {
	return strings.HasPrefix(topic, a.root()) || topic+"/" == a.root()
}

// root is the topic prefix with its trailing slash.
func (a ACL) root() string { return strings.TrimSuffix(a.Topics.HubPresence(), "hub/presence") }
