package uplink

import (
	"log/slog"
	"sync"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/sync/store"
)

// Attach connects a daemon to its hub from outside: an agent on the
// daemon's Assignments, keeping its outbox and desired document in st, which
// must stay open until stop returns. The hub pods stored on the device go
// to the daemon first, so call Attach before the daemon's Run: they run
// from its first reconciliation, even with the hub out of reach. Then the
// agent keeps the hub connection, mirrors the daemon's status stream and
// tells it how the connection stands, until stop, which waits for all.
func Attach(cfg Config, st *store.Store, d supervisor.Assignments, log *slog.Logger) (stop func(), err error) {
	_, stop, err = AttachAgent(cfg, st, d, log)
	return stop, err
}

// AttachAgent is Attach, and returns the agent too: the daemon's updater
// downloads and reports through it (Download, Report, HubReached).
func AttachAgent(cfg Config, st *store.Store, d supervisor.Assignments, log *slog.Logger) (*Agent, func(), error) {
	a, err := New(cfg, st, d, log)
	if err != nil {
		return nil, nil, err
	}
	gen, pods, fence, err := a.Stored()
	if err != nil {
		// The hub sends its document again at the next connection.
		log.Error("hub pods stored on this device cannot run", "err", err)
	}
	d.ExpectAssigned(gen, pods, fence)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { a.Run(done) })
	wg.Go(func() { a.Mirror(d, done) })
	wg.Go(func() { a.ReportLink(d, done) })
	var once sync.Once
	return a, func() { once.Do(func() { close(done); wg.Wait() }) }, nil
}
