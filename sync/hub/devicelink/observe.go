package devicelink

import (
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// Observer is told what the link stores and what it refuses, for the
// hub's /metrics (hubmetrics.Counters is one). It is called from the
// link's message handler, one message at a time: it must not block.
type Observer interface {
	// StatusItemsStored is told of a status batch stored: n new items
	// (a batch sent again adds none).
	StatusItemsStored(n int)
	// HeartbeatStored is told of each heartbeat stored.
	HeartbeatStored()
	// MessageRefused is told of each message refused, by the kind of
	// its topic (one the link subscribes to, so a bounded set).
	MessageRefused(kind string)
	// MessageNotOwned is told of each message left to the replica
	// that owns its device (replicas on PostgreSQL), by its topic's
	// kind.
	MessageNotOwned(kind string)
}

// nobody observes a link whose Config has no Observer.
type nobody struct{}

func (nobody) StatusItemsStored(int)  {}
func (nobody) HeartbeatStored()       {}
func (nobody) MessageRefused(string)  {}
func (nobody) MessageNotOwned(string) {}

// observer is the link's Observer, nobody for none.
func (h *Link) observer() Observer {
	if h.cfg.Observe == nil {
		return nobody{}
	}
	return h.cfg.Observe
}

// topicKind is a message's topic kind, "unknown" for a topic the link's
// layout does not parse.
func (h *Link) topicKind(m mqtt.Message) string {
	_, kind, err := h.topics.Parse(m.Topic())
	if err != nil {
		return "unknown"
	}
	return kind
}

// observeRefused tells the observer of a refused message, by its
// topic's kind.
func (h *Link) observeRefused(m mqtt.Message) {
	h.observer().MessageRefused(h.topicKind(m))
}
