package hub

import (
	"fmt"
	"log/slog"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Broker is podhub's embedded MQTT broker, for a fleet that one machine
// serves. Larger fleets point podhub and devices at an external broker.
type Broker struct {
	server *mochi.Server
	once   sync.Once
	err    error
}

// StartBroker listens on addr (host:port).
func StartBroker(addr string, log *slog.Logger) (*Broker, error) {
	s := mochi.New(&mochi.Options{Logger: log.With("component", "broker"), InlineClient: false})
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, err
	}
	if err := s.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})); err != nil {
		return nil, fmt.Errorf("broker listener %s: %w", addr, err)
	}
	if err := s.Serve(); err != nil {
		return nil, err
	}
	return &Broker{server: s}, nil
}

// Close stops the broker; it may be called more than once.
func (b *Broker) Close() error {
	b.once.Do(func() { b.err = b.server.Close() })
	return b.err
}
