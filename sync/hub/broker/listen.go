package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"time"
)

// maxHandshakes bounds the TLS handshakes in progress: a connection
// storm waits in the kernel's backlog instead of in memory.
const maxHandshakes = 128

// handshakeListener completes each connection's TLS handshake, within
// timeout, in a goroutine that ends with it, and hands the broker only
// connections that finished. The handshake needs a deep stack; done in
// the broker's per-client reader goroutine, that stack would stay with
// every idle client (it was a third of an idle device's cost).
type handshakeListener struct {
	raw     net.Listener
	config  *tls.Config
	timeout time.Duration
	log     *slog.Logger
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
}

func newHandshakeListener(raw net.Listener, config *tls.Config, timeout time.Duration, log *slog.Logger) *handshakeListener {
	l := &handshakeListener{raw: raw, config: config, timeout: timeout, log: log, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *handshakeListener) acceptLoop() {
	slots := make(chan struct{}, maxHandshakes)
	throttle := newBucket(1, 10, time.Now())
	for {
		c, err := l.raw.Accept()
		if err != nil {
			l.Close()
			return
		}
		select {
		case slots <- struct{}{}:
		case <-l.done:
			c.Close()
			return
		}
		go func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			defer cancel()
			tc := tls.Server(c, l.config)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				if throttle.allow(time.Now(), 1) {
					l.log.Warn("broker refused a TLS connection", "remote", c.RemoteAddr().String(), "err", err)
				}
				return
			}
			select {
			case l.conns <- tc:
			case <-l.done:
				tc.Close()
			}
		}()
	}
}

// Accept returns the next connection whose handshake succeeded.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handshakeListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.raw.Close()
	})
	return err
}

func (l *handshakeListener) Addr() net.Addr { return l.raw.Addr() }

// levelFilter passes on only records at or above a level: mochi logs
// every client that goes away as a warning, which a reconnecting flood
// would turn into a flood of log lines (the broker's own refusals are
// logged by brokerHook, throttled).
type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

func (f levelFilter) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFilter{f.Handler.WithAttrs(a), f.min}
}

func (f levelFilter) WithGroup(g string) slog.Handler {
	return levelFilter{f.Handler.WithGroup(g), f.min}
}
