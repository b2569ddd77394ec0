package uplink

import (
	"fmt"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"hash/fnv"
	"net/url"
	"strings"
	"sync"
)

// brokerList is the brokers of one cluster a device moves between: each
// connection tries them all, in order, starting where the list says.
// The first connection starts at a place the device ID chooses, so a
// fleet spreads over the nodes; after a connection is lost the next one
// starts at the broker after the one it was on, so a node that died is
// tried last, not first (a dead host costs a connect timeout).
type brokerList struct {
	urls []*url.URL

	mu   sync.Mutex
	next int // where the next connection's attempts start
	last int // the broker of the last attempt: the connected one after a success
}

// subackRefused tells whether the broker refused a subscription (SUBACK
// 0x80, which paho's token does not report as an error), and its code.
func subackRefused(tok mqtt.Token) (byte, bool) {
	st, ok := tok.(*mqtt.SubscribeToken)
	if !ok {
		return 0, false
	}
	for _, code := range st.Result() {
		if code >= 0x80 {
			return code, true
		}
	}
	return 0, false
}

// newBrokerList parses urls (at least one) for deviceID.
func newBrokerList(urls []string, deviceID string) (*brokerList, error) {
	b := &brokerList{}
	for _, s := range urls {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Scheme == "" {
			return nil, fmt.Errorf("hub: broker %q: want mqtt://HOST:PORT or mqtts://HOST:PORT", s)
		}
		b.urls = append(b.urls, u)
	}
	if len(b.urls) == 0 {
		return nil, fmt.Errorf("hub: no broker URL")
	}
	h := fnv.New32a()
	h.Write([]byte(deviceID))
	b.next = int(h.Sum32() % uint32(len(b.urls)))
	b.last = b.next
	return b, nil
}

// order is the brokers as the next connection tries them.
func (b *brokerList) order() []*url.URL {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(append([]*url.URL(nil), b.urls[b.next:]...), b.urls[:b.next]...)
}

// attempt records that a connection is being tried on u (paho's
// connection attempt handler).
func (b *brokerList) attempt(u *url.URL) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, v := range b.urls {
		if v == u || v.String() == u.String() {
			b.last = i
			return
		}
	}
}

// current is the broker of the last attempt, for logs.
func (b *brokerList) current() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.urls[b.last].String()
}

// lost moves the next connection's start past the broker whose
// connection was lost.
func (b *brokerList) lost() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next = (b.last + 1) % len(b.urls)
}
