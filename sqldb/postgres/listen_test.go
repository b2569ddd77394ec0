package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/pgtest"
)

// A listener hears what is NOTIFYed on its channel, in commit order,
// and keeps its one connection through many quiet checks (a check that
// broke it would reconnect, and make every replica resync, each time
// the store is quiet).
func TestListenerHearsAndStaysConnected(t *testing.T) {
	url := pgtest.URL(t)
	db, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mu sync.Mutex
	var heard []string
	var listens []bool
	got := make(chan struct{}, 64)
	l := &Listener{URL: url, Channel: "podhub test", Quiet: 20 * time.Millisecond,
		Notify: func(p string) {
			mu.Lock()
			heard = append(heard, p)
			mu.Unlock()
			got <- struct{}{}
		},
		Listening: func(pid uint32, reconnected bool) {
			mu.Lock()
			listens = append(listens, reconnected)
			mu.Unlock()
			got <- struct{}{}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wait := func(what string) {
		t.Helper()
		select {
		case <-got:
		case <-time.After(15 * time.Second):
			t.Fatalf("waited 15s for %s", what)
		}
	}
	wait("the listener to LISTEN")
	// Ten quiet checks or more, then two notifications.
	time.Sleep(250 * time.Millisecond)
	for _, p := range []string{"first", "second"} {
		if _, err := db.Exec(`SELECT pg_notify(?, ?)`, "podhub test", p); err != nil {
			t.Fatal(err)
		}
	}
	wait("the first notification")
	wait("the second notification")
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || heard[0] != "first" || heard[1] != "second" {
		t.Fatalf("heard %q, want [first second]", heard)
	}
	if len(listens) != 1 || listens[0] {
		t.Fatalf("listened %d times (reconnected: %v), want once: the quiet checks broke the connection", len(listens), listens)
	}
}
