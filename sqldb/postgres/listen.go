package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener follows a NOTIFY channel on a connection of its own (the
// pool's connections come and go; LISTEN belongs to one session).
type Listener struct {
	// URL is the store's; Channel the channel LISTENed to (an
	// identifier: quoted as one).
	URL, Channel string
	// Notify takes each notification's payload, in the order the
	// transactions that sent them committed. It must not block long:
	// the server queues what waits (up to its 8 GB notification queue).
	Notify func(payload string)
	// Listening is called each time LISTEN is in place, the first time
	// and after each lost connection (reconnected): what was sent
	// before (while disconnected, or before the first) was not heard,
	// so its callee resyncs. pid is the connection's server process.
	Listening func(pid uint32, reconnected bool)
	// Quiet is how long the connection may stay quiet before it is
	// checked with a query (0: 30 s): a server gone without a word (a
	// network cut) is found within Quiet + 10 s.
	Quiet time.Duration
	// Log takes connection losses and reconnections (nil: none).
	Log *slog.Logger
}

// Bounds of the listener's connection.
const (
	// listenQuiet is Quiet's default; listenTimeout bounds a query of
	// the listener's (LISTEN, the quiet check) and its close.
	listenQuiet   = 30 * time.Second
	listenTimeout = 10 * time.Second
	// Reconnections back off from listenBackoff doubling to
	// listenBackoffMax.
	listenBackoff    = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// Run listens until ctx ends, reconnecting with backoff after a lost
// connection (calling Listening each time it listens).
func (l *Listener) Run(ctx context.Context) {
	passwords := passwordsOf(l.URL)
	if cfg, err := pgx.ParseConfig(l.URL); err == nil {
		passwords = append(passwords, cfg.Password) // from a passfile or the environment: kept out of logs too
	}
	backoff := listenBackoff
	for lost := false; ; lost = true {
		listening, err := l.session(ctx, lost)
		if ctx.Err() != nil {
			return
		}
		if listening {
			backoff = listenBackoff
		}
		if l.Log != nil {
			l.Log.Warn("store: the change feed's connection ended; reconnecting",
				"store", Mask(l.URL), "err", scrub(err, passwords...), "in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// session connects, listens, and hands notifications on until the
// connection fails or ctx ends. listening says LISTEN was reached.
func (l *Listener) session(ctx context.Context, lost bool) (listening bool, err error) {
	cfg, err := pgx.ParseConfig(l.URL)
	if err != nil {
		return false, err
	}
	cfg.RuntimeParams["application_name"] = "podhub changes"
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), listenTimeout)
		conn.Close(cctx)
		cancel()
	}()
	qctx, cancel := context.WithTimeout(ctx, listenTimeout)
	_, err = conn.Exec(qctx, "LISTEN "+pgx.Identifier{l.Channel}.Sanitize())
	cancel()
	if err != nil {
		return false, fmt.Errorf("LISTEN %s: %w", l.Channel, err)
	}
	if lost && l.Log != nil {
		l.Log.Info("store: the change feed's connection is back; readers resync", "store", Mask(l.URL))
	}
	if l.Listening != nil {
		l.Listening(conn.PgConn().PID(), lost)
	}
	quiet := l.Quiet
	if quiet <= 0 {
		quiet = listenQuiet
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, quiet)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.Notify(n.Payload)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed():
			return true, err
		}
		// Quiet for a while: is the server still there?
		pctx, cancel := context.WithTimeout(ctx, listenTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return true, fmt.Errorf("checking a quiet connection: %w", err)
		}
	}
}
