package uplink

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// Statuses is the daemon's status stream (part of supervisor.Assignments).
type Statuses interface {
	// Pods is every pod's newest status, the version (0: nothing
	// published yet) and a channel closed at the next change.
	Pods() ([]*v1.Pod, uint64, <-chan struct{})
	// PodEvents are the daemon's pod events.
	PodEvents() <-chan supervisor.PodEvent
}

// mirrorSettle gathers the status changes of a burst of the daemon's
// steps into one outbox transaction.
const mirrorSettle = 100 * time.Millisecond

// Mirror sends the daemon's status stream to the hub until stop closes:
// every pod's status when it changes, as the pod's newest mirror, a pod's
// disappearance, and pod events, all through the outbox. It follows the
// daemon's published view, so it costs the daemon's loop nothing. It
// starts from what the outbox holds, so that the hub hears of a pod that
// went while the daemon was down, and is not sent what it has.
func (a *Agent) Mirror(src Statuses, stop <-chan struct{}) {
	var m mirror
	if held, err := a.store.Mirrored(); err != nil {
		a.log.Error("reading the statuses the hub holds; every pod is sent again", "err", err)
	} else {
		m.seed(held)
	}
	var items []store.Item
	events := src.PodEvents()
	for {
		pods, version, changed := src.Pods()
		if version > 0 { // an empty view before the first is no news
			items = append(items, m.changes(pods)...)
		}
	queued:
		for {
			select {
			case ev := <-events:
				items = append(items, eventItem(ev))
			default:
				break queued
			}
		}
		if len(items) > 0 {
			if err := a.Publish(items); err != nil {
				// Forget what was sent: the next round queues every pod.
				a.log.Error("queueing statuses for the hub", "err", err)
				m.forget()
			}
			items = nil
		}
		select {
		case <-stop:
			return
		case <-changed:
		case ev := <-events:
			items = append(items, eventItem(ev))
		}
		select {
		case <-stop:
			return
		case <-time.After(mirrorSettle):
		}
	}
}

// mirror is what the hub was last given of each pod (by namespace/name),
// so that only changes go to the outbox. The zero value is empty.
type mirror struct {
	sent     map[string]*v1.Pod
	sentJSON map[string][]byte
}

// changes are the outbox items that bring the hub from what it was given
// to pods: the status of each pod whose JSON changed, and an empty item
// (a deletion) for each pod gone. Of two pods of one name (an old
// instance terminating beside its replacement) the later one counts.
func (m *mirror) changes(pods []*v1.Pod) []store.Item {
	if m.sent == nil {
		m.sent, m.sentJSON = map[string]*v1.Pod{}, map[string][]byte{}
	}
	current := make(map[string]*v1.Pod, len(pods))
	var order []string
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if current[key] == nil {
			order = append(order, key)
		}
		current[key] = p
	}
	var items []store.Item
	for _, key := range order {
		p := current[key]
		if m.sent[key] == p {
			continue // the view publishes a new object for every change
		}
		b, err := json.Marshal(p)
		if err != nil || bytes.Equal(b, m.sentJSON[key]) {
			m.sent[key] = p
			continue
		}
		items = append(items, store.Item{Key: key, Kind: store.KindPod, Payload: b})
		m.sent[key], m.sentJSON[key] = p, b
	}
	for _, key := range slices.Sorted(maps.Keys(m.sent)) {
		if current[key] == nil {
			items = append(items, store.Item{Key: key, Kind: store.KindPod})
			delete(m.sent, key)
			delete(m.sentJSON, key)
		}
	}
	return items
}

// seed starts from what the hub holds: each pod's status by key.
func (m *mirror) seed(held map[string][]byte) {
	m.sent, m.sentJSON = make(map[string]*v1.Pod, len(held)), make(map[string][]byte, len(held))
	for key, b := range held {
		m.sent[key], m.sentJSON[key] = nil, b
	}
}

// forget makes the next changes give every pod again.
func (m *mirror) forget() {
	clear(m.sent)
	clear(m.sentJSON)
}

// eventItem is a pod event as the outbox keeps it.
func eventItem(ev supervisor.PodEvent) store.Item {
	payload, _ := json.Marshal(protocol.Event{Time: ev.Time, Type: ev.Type, Reason: ev.Reason, Message: ev.Message})
	return store.Item{Key: ev.Pod, Kind: store.KindEvent, Payload: payload}
}
