package fleetdb

import (
	"database/sql"
	"sync"
	"sync/atomic"
)

// stmtCache keeps the prepared statements of the report paths (a status
// batch, an ack, a heartbeat, a desired document): the SQLite driver
// parses and compiles a query's text at every Exec, which was half the
// hub's cost of storing a status batch. Statements are prepared once,
// when the fleet opens, on its one connection, and bound to each
// transaction with tx.Stmt.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// unprepared counts the queries prepared in a transaction (a test
	// checks the report paths use only prepared ones).
	unprepared atomic.Int64
}

// prepare prepares the queries; the database's one connection must be
// free (a transaction holding it would wait for itself).
func (c *stmtCache) prepare(queries []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	for _, q := range queries {
		s, err := c.db.Prepare(q)
		if err != nil {
			return err
		}
		c.m[q] = s
	}
	return nil
}

// stmt binds the prepared query to tx; a query not prepared at open is
// prepared in tx, for this transaction only.
func (c *stmtCache) stmt(tx *sql.Tx, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	s, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		c.unprepared.Add(1)
		return tx.Prepare(query)
	}
	return tx.Stmt(s), nil
}

// exec runs a cached statement in tx.
func (c *stmtCache) exec(tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	s, err := c.stmt(tx, query)
	if err != nil {
		return nil, err
	}
	return s.Exec(args...)
}

// queryRow runs a cached one-row query in tx and scans it into dest.
func (c *stmtCache) queryRow(tx *sql.Tx, query string, args []any, dest ...any) error {
	s, err := c.stmt(tx, query)
	if err != nil {
		return err
	}
	return s.QueryRow(args...).Scan(dest...)
}

// dbQueryRow runs a prepared one-row query outside a transaction.
func (c *stmtCache) dbQueryRow(query string, args []any, dest ...any) error {
	c.mu.Lock()
	s, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		c.unprepared.Add(1)
		return c.db.QueryRow(query, args...).Scan(dest...)
	}
	return s.QueryRow(args...).Scan(dest...)
}

// close releases the statements.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.Close()
	}
	c.m = nil
}
