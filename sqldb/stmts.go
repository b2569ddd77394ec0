package sqldb

import (
	"database/sql"
	"sync"
	"sync/atomic"
)

// Stmts keeps a database's prepared statements by query text: the SQLite
// driver parses and compiles a query's text at every Exec, a large part
// of the cost of a hot path's small statements. A statement is prepared
// once, on the database (whose one connection must then be free: a
// transaction holding it would wait for itself), and bound to each
// transaction with tx.Stmt.
type Stmts struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// unprepared counts the queries run without a statement prepared
	// before (a test checks a hot path uses only prepared ones).
	unprepared atomic.Int64
}

// NewStmts is an empty cache of db's statements.
func NewStmts(db *sql.DB) *Stmts { return &Stmts{db: db, m: map[string]*sql.Stmt{}} }

// Prepare returns the queries' statements, preparing those not prepared
// yet; the database's one connection must be free.
func (c *Stmts) Prepare(queries ...string) ([]*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	out := make([]*sql.Stmt, len(queries))
	for i, q := range queries {
		s, ok := c.m[q]
		if !ok {
			var err error
			if s, err = c.db.Prepare(q); err != nil {
				return nil, err
			}
			c.m[q] = s
		}
		out[i] = s
	}
	return out, nil
}

// Stmt binds the prepared query to tx; a query not prepared before is
// prepared in tx, for this transaction only.
func (c *Stmts) Stmt(tx *sql.Tx, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	s, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		c.unprepared.Add(1)
		return tx.Prepare(query)
	}
	return tx.Stmt(s), nil
}

// Exec runs a cached statement in tx.
func (c *Stmts) Exec(tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	s, err := c.Stmt(tx, query)
	if err != nil {
		return nil, err
	}
	return s.Exec(args...)
}

// QueryRow runs a cached one-row query in tx and scans it into dest.
func (c *Stmts) QueryRow(tx *sql.Tx, query string, args []any, dest ...any) error {
	s, err := c.Stmt(tx, query)
	if err != nil {
		return err
	}
	return s.QueryRow(args...).Scan(dest...)
}

// DBQueryRow runs a prepared one-row query outside a transaction.
func (c *Stmts) DBQueryRow(query string, args []any, dest ...any) error {
	c.mu.Lock()
	s, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		c.unprepared.Add(1)
		return c.db.QueryRow(query, args...).Scan(dest...)
	}
	return s.QueryRow(args...).Scan(dest...)
}

// Unprepared is how many queries ran without a statement prepared before.
func (c *Stmts) Unprepared() int64 { return c.unprepared.Load() }

// Close releases the statements.
func (c *Stmts) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.Close()
	}
	c.m = nil
}
