package workloaddb_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/test/pgtest"
)

// A session that holds the scheduling lock and stays idle (a replica
// paused in a pass, or one whose connection outlived its process) is
// ended by the next taker once idle for stuckAfter, so the fleet's
// scheduling does not wait on it for ever; a holder that runs (touching
// its session) keeps the lock however long it holds it.
func TestSchedulingLockHeldByAStuckSessionIsTaken(t *testing.T) {
	url := pgtest.URL(t)
	workloaddb.SetLockTiming(t.Cleanup, 100*time.Millisecond, 1500*time.Millisecond, 300*time.Millisecond)
	f, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := workloaddb.New(f.SQL())

	// A live holder: held for 3 s (twice stuckAfter); a taker waits.
	unlock, err := s.LockScheduling(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(3 * time.Second)
		released <- time.Now()
		unlock()
	}()
	start := time.Now()
	unlock2, err := s.LockScheduling(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	at := <-released
	if time.Since(start) < 3*time.Second || time.Now().Before(at) {
		t.Fatalf("the lock was taken from a holder that runs, after %v", time.Since(start))
	}
	unlock2()

	// A stuck holder: a session of its own that takes the lock and
	// never touches it again.
	stuck, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stuck.Close() })
	conn, err := stuck.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_lock($1)`, int64(0x706f646875620002)); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	unlock3, err := s.LockScheduling(ctx)
	if err != nil {
		t.Fatalf("waiting for the scheduling lock held by an idle session: %v", err)
	}
	defer unlock3()
	took := time.Since(start)
	if took < 1500*time.Millisecond {
		t.Fatalf("taken after %v, before the holder was idle for stuckAfter", took)
	}
	t.Logf("the lock of a session idle for good taken after %v", took)
	if err := conn.PingContext(context.Background()); err == nil {
		t.Fatal("the stuck holder's session still answers: it should have been ended")
	}
}
