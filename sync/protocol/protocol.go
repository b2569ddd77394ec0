// Package protocol is the device↔hub wire format: the MQTT topic tree,
// the JSON documents exchanged on it, their signatures and their strict
// decoders. It performs no I/O. docs/protocol.md describes it for people
// writing their own hub or device.
package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	kjson "sigs.k8s.io/json"
)

// Schema is the version of every document this package writes. A reader
// refuses a document of another schema by name rather than guess.
const Schema = 1

// DefaultPrefix roots the topic tree; the version in it changes only with
// an incompatible topic layout.
const DefaultPrefix = "podvisor/v1"

// Size limits, checked before any parsing. A desired document holds whole
// pods; a status batch holds at most MaxBatch mirror pods.
const (
	MaxDesiredBytes = 1 << 20
	MaxMessageBytes = 256 << 10
	MaxBatch        = 64
)

// Kinds of topic under a device.
const (
	KindDesired   = "desired"    // hub → device, retained, signed
	KindAck       = "ack"        // device → hub, retained: the last applied generation
	KindStatus    = "status"     // device → hub: batches of mirror pod statuses and events
	KindStatusAck = "status-ack" // hub → device: the highest sequence number stored
	KindHeartbeat = "heartbeat"  // device → hub: node status
	KindPresence  = "presence"   // device → hub, retained; the MQTT last will says offline
)

// Topics names the topic tree under a prefix:
//
//	<prefix>/devices/<device>/<kind>
//	<prefix>/hub/presence                  hub → devices, retained
type Topics struct{ Prefix string }

// HubPresence is where the hub announces each (re)connection: devices
// then send again what it has not acknowledged, which a broker without
// the hub's session would have dropped meanwhile.
func (t Topics) HubPresence() string { return t.prefix() + "/hub/presence" }

// Device is a device's topic of a kind.
func (t Topics) Device(device, kind string) string {
	return t.prefix() + "/devices/" + device + "/" + kind
}

// All is the filter of one kind of topic for every device (the hub's
// subscriptions).
func (t Topics) All(kind string) string { return t.prefix() + "/devices/+/" + kind }

// Parse splits a device topic into its device and kind.
func (t Topics) Parse(topic string) (device, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, t.prefix()+"/devices/")
	if !ok {
		return "", "", fmt.Errorf("topic %q is not under %s/devices/", topic, t.prefix())
	}
	device, kind, ok = strings.Cut(rest, "/")
	if !ok || strings.Contains(kind, "/") {
		return "", "", fmt.Errorf("topic %q: want %s/devices/<device>/<kind>", topic, t.prefix())
	}
	if err := ValidDeviceID(device); err != nil {
		return "", "", fmt.Errorf("topic %q: %w", topic, err)
	}
	return device, kind, nil
}

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultPrefix
	}
	return strings.TrimSuffix(t.Prefix, "/")
}

// ValidDeviceID accepts what can be a topic level, a client ID and a
// label value: 1–63 of [a-z0-9.-_], starting and ending alphanumeric.
func ValidDeviceID(id string) error {
	if len(id) == 0 || len(id) > 63 {
		return fmt.Errorf("device ID %q: must be 1 to 63 characters", id)
	}
	for i, r := range id {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(id)-1 || !strings.ContainsRune("-._", r)) {
			return fmt.Errorf("device ID %q: only lower-case letters, digits and - . _ inside, letters or digits at both ends", id)
		}
	}
	return nil
}

// decodeStrict decodes one JSON document of a kind: it refuses
// oversized payloads, NUL characters anywhere (the hub's store cannot
// keep them), unknown and duplicate fields (naming them), wrong types and
// another schema.
func decodeStrict(what string, data []byte, limit int, v any, schema func() int) error {
	if len(data) > limit {
		return fmt.Errorf("%s: %d bytes, over the %d byte limit", what, len(data), limit)
	}
	if err := refuseNUL(what, data); err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(strict) > 0 {
		// Unknown field names are the sender's text: bounded, the
		// refusal is logged.
		return fmt.Errorf("%s: %s", what, clipText(errors.Join(strict...).Error(), 256))
	}
	if s := schema(); s != Schema {
		return fmt.Errorf("%s: schema %d, this podvisor speaks %d", what, s, Schema)
	}
	return nil
}

// clipText cuts s to at most n bytes, saying how long it was.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:n], ""), len(s))
}

// quote quotes a field of an untrusted message for a refusal, at most 64
// bytes of it.
func quote(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(strings.ToValidUTF8(s[:64], "")), len(s))
}
