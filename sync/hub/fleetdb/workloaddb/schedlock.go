package workloaddb

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/podvisor/podvisor/sqldb"
)

// schedulingLock is the PostgreSQL advisory lock key the scheduling
// passes and the API's writes to the hub's pods hold (LockScheduling);
// sqldb/postgres's writer lock is store 1 ("podhub", 0001), this is 2.
const schedulingLock int64 = 0x706f646875620002

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
// (released by the server if the process dies); take it BEFORE a
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
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(?)`, schedulingLock); err != nil {
		conn.Close()
		return nil, fmt.Errorf("the scheduling lock: %w", err)
	}
	return func() {
		if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock(?)`, schedulingLock); err != nil {
			// Never back to the pool still holding the lock: the
			// connection is closed (which ends the session's locks).
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}, nil
}
