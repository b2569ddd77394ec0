package workloaddb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/podvisor/podvisor/sqldb"
)

// schedulingLock is the PostgreSQL advisory lock key the scheduling
// passes and the API's writes to the hub's pods hold (LockScheduling);
// sqldb/postgres's writer lock is store 1 ("podhub", 0001), this is 2.
const schedulingLock int64 = 0x706f646875620002

// Timing of the scheduling lock's liveness: its holder touches its
// session every lockBeat, so a session holding it idle for stuckAfter
// belongs to a process that no longer runs (paused, or gone while its
// TCP connection stays open); a waiter ends that session after waiting
// lockWait at a time. Without it a leader paused in a pass would hold
// every later pass and eviction of the fleet for as long as it stays
// paused, its successor included. (Variables for the tests.)
var (
	lockBeat   = 5 * time.Second
	stuckAfter = 30 * time.Second
	lockWait   = 10 * time.Second
)

// LockScheduling takes the scheduling lock, held until unlock runs: a
// scheduling pass holds it from its first read to its last write, and a
// write of the API to hub pods outside a pass (an eviction, a graceful
// delete) holds it around its transaction, so neither runs inside the
// other. Within one process the scheduler's mutex already does that;
// several replicas on one PostgreSQL store need it in the database: a
// pass on the leader reads the pods and budgets, decides, then stores
// its older view over an eviction another replica committed meanwhile
// (an evicted pod stored again, bound; a budget's charge overwritten).
// On PostgreSQL it is a session advisory lock on a connection of its own
// (released by the server if the process dies, and ended by a waiter if
// its holder stops touching it: stuckAfter); take it BEFORE a
// transaction, never inside one (every transaction holds the store's
// writer lock, which a pass holding this one waits for: the other order
// would deadlock). On SQLite (one process) it is nothing.
func (f *Store) LockScheduling(ctx context.Context) (unlock func(), err error) {
	if f.db.Dialect != sqldb.Postgres {
		return func() {}, nil
	}
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("the scheduling lock: %w", err)
	}
	if err := acquire(ctx, conn); err != nil {
		conn.Raw(func(any) error { return driver.ErrBadConn }) // its lock_timeout was changed
		conn.Close()
		return nil, fmt.Errorf("the scheduling lock: %w", err)
	}
	stop, beaten := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beaten)
		touchWhileHeld(conn, stop)
	}()
	return func() {
		close(stop)
		<-beaten
		if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock(?)`, schedulingLock); err != nil {
			// Never back to the pool still holding the lock: the
			// connection is closed (which ends the session's locks).
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}, nil
}

// acquire waits for the lock on conn, lockWait at a time (the session's
// lock_timeout: a cancelled statement would cost pgx the connection);
// between waits it ends the session of a holder idle for stuckAfter
// (endStuckHolder).
func acquire(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`SET lock_timeout = %d`, lockWait.Milliseconds())); err != nil {
		return err
	}
	for {
		_, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(?)`, schedulingLock)
		if err == nil {
			_, err = conn.ExecContext(ctx, `RESET lock_timeout`)
			return err
		}
		if ctx.Err() != nil || !sqldb.LockTimedOut(err) {
			return err
		}
		if err := endStuckHolder(ctx, conn); err != nil {
			return err
		}
	}
}

// endStuckHolder ends the session holding the scheduling lock if it has
// been idle for stuckAfter: its holder touches it every lockBeat while it
// runs. Ending a session needs the same role as the replicas' (or
// pg_signal_backend), which every replica has.
func endStuckHolder(ctx context.Context, conn *sql.Conn) error {
	var pid int64
	var idle float64
	err := conn.QueryRowContext(ctx, `SELECT a.pid, EXTRACT(EPOCH FROM now() - a.state_change)
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
		  AND l.objsubid = 1 AND ((l.classid::bigint << 32) | l.objid::bigint) = ? AND a.state = 'idle'`, schedulingLock).Scan(&pid, &idle)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // held by a session at work, or just released
	}
	if err != nil {
		return fmt.Errorf("finding its holder: %w", err)
	}
	if time.Duration(idle*float64(time.Second)) < stuckAfter {
		return nil
	}
	var ended bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_terminate_backend(?)`, pid).Scan(&ended); err != nil {
		return fmt.Errorf("ending the session of its holder (pid %d, idle %.0f s): %w", pid, idle, err)
	}
	return nil
}

// touchWhileHeld runs a statement on the lock's session every lockBeat
// until stop: its state_change shows it alive (endStuckHolder).
func touchWhileHeld(conn *sql.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(lockBeat)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			// Bounded by stuckAfter, not lockBeat: a cancelled statement
			// costs pgx its connection, and with it the session and the
			// lock; a slow touch is no sign of a stuck holder.
			ctx, cancel := context.WithTimeout(context.Background(), stuckAfter)
			conn.ExecContext(ctx, `SELECT 1`)
			cancel()
		}
	}
}
