package natstest

import (
	"fmt"
	"strings"

	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Kinds are every kind of device topic of the protocol (sync/protocol).
var Kinds = []string{
	protocol.KindDesired, protocol.KindAck, protocol.KindStatus, protocol.KindStatusAck, protocol.KindHeartbeat,
	protocol.KindPresence, protocol.KindUpdate, protocol.KindUpdateState, protocol.KindFetch, protocol.KindChunk,
	protocol.KindObjects, protocol.KindObjectGet, protocol.KindObject, protocol.KindSealKey,
	protocol.KindLogsRequest, protocol.KindLogs,
}

// Subject is the NATS subject nats-server 2.9 maps an MQTT topic to:
// each '/' becomes '.', '+' '*' and '#' '>'. A topic holding '.', ' '
// or a NATS wildcard inside a level has no subject in 2.9: the server
// refuses it (docs/brokers.md), so Subject does too.
func Subject(topic string) (string, error) {
	if topic == "" || strings.HasPrefix(topic, "/") || strings.HasSuffix(topic, "/") || strings.Contains(topic, "//") {
		return "", fmt.Errorf("topic %q: an empty level has no NATS 2.9 subject podvisor uses", topic)
	}
	levels := strings.Split(topic, "/")
	for i, l := range levels {
		switch {
		case l == "+":
			levels[i] = "*"
		case l == "#":
			levels[i] = ">"
		case strings.ContainsAny(l, ". \t*>+#"):
			return "", fmt.Errorf("topic %q: level %q holds a character NATS 2.9's MQTT refuses in a topic ('.', white space or a wildcard)", topic, l)
		}
	}
	return strings.Join(levels, "."), nil
}

// MQTTDeliverSubjects are where nats-server 2.9 delivers a QoS 1
// subscription's messages to the client (mqttSubPrefix): every user
// with QoS 1 subscriptions must be allowed to subscribe to them.
const MQTTDeliverSubjects = "$MQTT.sub.>"

// Permissions are what identity may publish and subscribe to, in NATS
// subjects: what the embedded broker's ACL (sync/hub/broker) allows it
// among the protocol's topics, so both brokers enforce one rule. The
// hub gets the whole tree under prefix.
func Permissions(prefix, identity string) (publish, subscribe []string, err error) {
	topics := protocol.Topics{Prefix: prefix}
	acl := broker.ACL{Topics: topics}
	root := strings.TrimSuffix(topics.HubPresence(), "/hub/presence")
	if identity == pki.HubIdentity {
		all, err := Subject(root + "/#")
		return []string{all}, []string{all, MQTTDeliverSubjects}, err
	}
	if err := acl.CheckIdentity(identity, identity); err != nil {
		return nil, nil, err
	}
	add := func(list *[]string, topic string) error {
		s, err := Subject(topic)
		if err == nil {
			*list = append(*list, s)
		}
		return err
	}
	for _, kind := range Kinds {
		topic := topics.Device(identity, kind)
		if acl.CheckPublish(identity, topic, false, 1) == nil || acl.CheckPublish(identity, topic, true, 1) == nil {
			if err := add(&publish, topic); err != nil {
				return nil, nil, err
			}
		}
		if acl.CheckRead(identity, topic) == nil {
			if err := add(&subscribe, topic); err != nil {
				return nil, nil, err
			}
		}
	}
	if acl.CheckRead(identity, topics.HubPresence()) == nil {
		if err := add(&subscribe, topics.HubPresence()); err != nil {
			return nil, nil, err
		}
	}
	// A QoS 1 subscription is a JetStream consumer delivering to
	// $MQTT.sub.<random>, which the client's user subscribes to.
	subscribe = append(subscribe, MQTTDeliverSubjects)
	return publish, subscribe, nil
}

// Authorization is the authorization block of a node's configuration:
// one user per certificate, named by the certificate's subject as
// verify_and_map sees it ("CN=<identity>"; podhub's certificates have
// only a common name), the hub's and each device's, with Permissions.
func Authorization(prefix string, devices []string) (string, error) {
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	for _, id := range append([]string{pki.HubIdentity}, devices...) {
		pub, sub, err := Permissions(prefix, id)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    {user: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}}}\n",
			"CN="+id, quoteAll(pub), quoteAll(sub))
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
