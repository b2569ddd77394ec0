package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// HubClient is the hub's connection to this broker: paho's Client over
// mochi's inline client. It needs no certificate (it is the broker's own
// client, outside the ACL), and no network write queue, so the queue of
// every network client can be small. Messages reach the hub one at a
// time in arrival order, as with paho's OrderMatters, through a short
// queue: a client that floods the hub waits for it, and the hub's work
// (SQLite's deep stack) runs on one goroutine, never on the clients'.
func (b *Broker) HubClient(opts *mqtt.ClientOptions) mqtt.Client {
	return &inlineClient{server: b.server, opts: opts, subs: map[string]int{}}
}

// hubQueue is how many messages wait for the hub.
const hubQueue = 64

type delivery struct {
	handler mqtt.MessageHandler
	pk      packets.Packet
}

type inlineClient struct {
	server    *mochi.Server
	opts      *mqtt.ClientOptions
	queue     chan delivery
	stop      chan struct{}
	connected atomic.Bool

	mu     sync.Mutex
	subs   map[string]int // filter → subscription ID
	nextID int
}

func (c *inlineClient) IsConnected() bool      { return c.connected.Load() }
func (c *inlineClient) IsConnectionOpen() bool { return c.connected.Load() }

// Connect starts the delivery goroutine and runs the OnConnect handler.
func (c *inlineClient) Connect() mqtt.Token {
	if c.connected.Swap(true) {
		return doneToken{}
	}
	c.queue, c.stop = make(chan delivery, hubQueue), make(chan struct{})
	go func(queue chan delivery, stop chan struct{}) {
		for {
			select {
			case d := <-queue:
				d.handler(c, inlineMessage{d.pk})
			case <-stop:
				return
			}
		}
	}(c.queue, c.stop)
	if c.opts.OnConnect != nil {
		c.opts.OnConnect(c)
	}
	return doneToken{}
}

// Disconnect publishes the last will, as a broker does for a client that
// goes, and drops the subscriptions.
func (c *inlineClient) Disconnect(uint) {
	if !c.connected.Swap(false) {
		return
	}
	if c.opts.WillEnabled {
		c.server.Publish(c.opts.WillTopic, c.opts.WillPayload, c.opts.WillRetained, c.opts.WillQos)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for filter, id := range c.subs {
		c.server.Unsubscribe(filter, id)
	}
	c.subs = map[string]int{}
	close(c.stop)
}

func (c *inlineClient) Publish(topic string, qos byte, retained bool, payload interface{}) mqtt.Token {
	var data []byte
	switch p := payload.(type) {
	case []byte:
		data = p
	case string:
		data = []byte(p)
	default:
		return doneToken{fmt.Errorf("publish %s: payload of type %T", topic, payload)}
	}
	if !c.connected.Load() {
		return doneToken{errors.New("not connected")}
	}
	return doneToken{c.server.Publish(topic, data, retained, qos)}
}

func (c *inlineClient) Subscribe(filter string, _ byte, callback mqtt.MessageHandler) mqtt.Token {
	c.mu.Lock()
	if id, ok := c.subs[filter]; ok {
		c.server.Unsubscribe(filter, id)
	}
	c.nextID++
	id := c.nextID
	c.subs[filter] = id
	c.mu.Unlock()
	queue, stop := c.queue, c.stop
	err := c.server.Subscribe(filter, id, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		select {
		case queue <- delivery{callback, pk}:
		case <-stop:
		}
	})
	return doneToken{err}
}

func (c *inlineClient) SubscribeMultiple(filters map[string]byte, callback mqtt.MessageHandler) mqtt.Token {
	var errs []error
	for f, q := range filters {
		errs = append(errs, c.Subscribe(f, q, callback).Error())
	}
	return doneToken{errors.Join(errs...)}
}

func (c *inlineClient) Unsubscribe(filters ...string) mqtt.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, f := range filters {
		if id, ok := c.subs[f]; ok {
			errs = append(errs, c.server.Unsubscribe(f, id))
			delete(c.subs, f)
		}
	}
	return doneToken{errors.Join(errs...)}
}

// AddRoute is not needed by the hub: every subscription has its handler.
func (c *inlineClient) AddRoute(string, mqtt.MessageHandler) {}

func (c *inlineClient) OptionsReader() mqtt.ClientOptionsReader { return mqtt.NewOptionsReader(c.opts) }

// doneToken is a completed operation.
type doneToken struct{ err error }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (t doneToken) Wait() bool                     { return true }
func (t doneToken) WaitTimeout(time.Duration) bool { return true }
func (t doneToken) Done() <-chan struct{}          { return closedChan }
func (t doneToken) Error() error                   { return t.err }

// inlineMessage is a delivered packet as paho's Message.
type inlineMessage struct{ pk packets.Packet }

func (m inlineMessage) Duplicate() bool   { return m.pk.FixedHeader.Dup }
func (m inlineMessage) Qos() byte         { return m.pk.FixedHeader.Qos }
func (m inlineMessage) Retained() bool    { return m.pk.FixedHeader.Retain }
func (m inlineMessage) Topic() string     { return m.pk.TopicName }
func (m inlineMessage) MessageID() uint16 { return m.pk.PacketID }
func (m inlineMessage) Payload() []byte   { return m.pk.Payload }
func (m inlineMessage) Ack()              {}
