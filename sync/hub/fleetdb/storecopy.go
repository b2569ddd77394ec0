package fleetdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sqldb"
)

// CopySkipped are the tables of the SQLite schema that CopyStore leaves
// behind, each with its reason; every other table of the schema is
// copied, whatever its name (SQLite's own, sqlite_*, are never data):
// a table a later migration adds is copied without a change here.
var CopySkipped = map[string]string{
	"fleet_schema":  "the schema's version: the target's migrations keep their own",
	"schema_floor":  "the schema's floor: the target's migrations keep their own",
	"replicas":      "the podhub processes alive on the store: each replica writes its own row as it starts",
	"leases":        "the leader lease: a replica on the new store takes it",
	"device_owners": "which replica handles which devices: the replicas on the new store share them out",
}

// DefaultCopyBatch is how many rows one INSERT of CopyStore carries.
const DefaultCopyBatch = 500

// maxParams is PostgreSQL's bound on one statement's parameters.
const maxParams = 65535

// ErrTargetNotEmpty is a copy refused because the target store holds
// fleet rows already: a copy never merges two fleets.
var ErrTargetNotEmpty = errors.New("the target store is not empty (a copy never merges two fleets: copy into an empty database)")

// TableCopy is one table CopyStore copied and its rows.
type TableCopy struct {
	Table string
	Rows  int64
}

// copyTable is how one table is copied: the columns read from SQLite
// (rowid: its implicit one) and written to PostgreSQL, in one order.
type copyTable struct {
	name     string
	cols     []string
	types    []string // PostgreSQL's data_type of each
	identity []string // the identity columns among cols: their sequences are moved past the rows
}

// CopyStore copies the fleet of src, an SQLite store, into dst, an
// empty PostgreSQL store, both opened (so migrated) by this release:
// every table of the SQLite schema but CopySkipped's, every row, every
// column (a table's implicit rowid into PostgreSQL's rowid identity,
// whose sequence then starts past the copied rows). It reads src in one
// transaction, which waits out and then holds off its other writers,
// and writes dst in one transaction holding the store's writer lock, in
// multi-row INSERTs of batch rows (0: DefaultCopyBatch): all or
// nothing. Before writing it refuses a dst that holds any row a fresh
// store does not (ErrTargetNotEmpty, naming the table); after, it
// checks every table's row count against src's. It tells no replica:
// replicas start on dst after the copy.
func CopyStore(ctx context.Context, dst, src *Fleet, batch int) ([]TableCopy, error) {
	if src.dialect != sqldb.SQLite || dst.dialect != sqldb.Postgres {
		return nil, fmt.Errorf("copying a fleet store: from %s to %s: only SQLite to PostgreSQL", src.dialect, dst.dialect)
	}
	if batch <= 0 {
		batch = DefaultCopyBatch
	}
	stx, err := src.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the SQLite store: %w", err)
	}
	defer stx.Rollback()
	tx, err := dst.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	tables, err := copyPlan(ctx, stx, tx)
	if err != nil {
		return nil, err
	}
	seeds, err := freshRows(tables)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if err := checkEmpty(ctx, tx, t, seeds[t.name]); err != nil {
			return nil, err
		}
	}
	var out []TableCopy
	for _, t := range tables {
		// A row a fresh store is made with (a counter's) gives way to
		// the source's.
		if len(seeds[t.name]) > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+quoteIdent(t.name)); err != nil {
				return nil, fmt.Errorf("table %s on PostgreSQL: %w", t.name, err)
			}
		}
		n, err := copyRows(ctx, tx, stx, t, batch)
		if err != nil {
			return nil, fmt.Errorf("copying table %s: %w", t.name, err)
		}
		for _, col := range t.identity {
			if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence(?, ?), m) FROM (SELECT max(`+quoteIdent(col)+`) AS m FROM `+quoteIdent(t.name)+`) s WHERE m IS NOT NULL`,
				quoteIdent(t.name), col); err != nil {
				return nil, fmt.Errorf("table %s: moving the sequence of %s past the copied rows: %w", t.name, col, err)
			}
		}
		var want, got int64
		if err := stx.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(t.name)).Scan(&want); err != nil {
			return nil, fmt.Errorf("table %s on SQLite: %w", t.name, err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(t.name)).Scan(&got); err != nil {
			return nil, fmt.Errorf("table %s on PostgreSQL: %w", t.name, err)
		}
		if got != want || n != want {
			return nil, fmt.Errorf("table %s: %d rows on SQLite, %d read, %d on PostgreSQL after the copy: nothing was copied", t.name, want, n, got)
		}
		out = append(out, TableCopy{Table: t.name, Rows: n})
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing the copy: %w", err)
	}
	return out, nil
}

// checkEmpty refuses a target table that holds other rows than a fresh
// store's (seeds).
func checkEmpty(ctx context.Context, tx *sql.Tx, t copyTable, seeds []string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(t.name)).Scan(&n); err != nil {
		return fmt.Errorf("table %s on PostgreSQL: %w", t.name, err)
	}
	if n == len(seeds) && n > 0 {
		rows, err := TableRows(ctx, tx, t.name, t.cols)
		if err != nil {
			return fmt.Errorf("table %s on PostgreSQL: %w", t.name, err)
		}
		if slices.Equal(rows, seeds) {
			return nil
		}
	} else if n == len(seeds) {
		return nil
	}
	return fmt.Errorf("table %s holds %d rows: %w", t.name, n, ErrTargetNotEmpty)
}

// copyPlan lists the tables to copy from the SQLite schema, with the
// columns both stores have; a table or column of SQLite's that
// PostgreSQL lacks is refused (its data would be lost).
func copyPlan(ctx context.Context, stx, tx *sql.Tx) ([]copyTable, error) {
	names, err := CopiedTables(ctx, stx)
	if err != nil {
		return nil, err
	}
	var out []copyTable
	for _, name := range names {
		lite, err := strings1(ctx, stx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, name)
		if err != nil {
			return nil, fmt.Errorf("table %s on SQLite: %w", name, err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT column_name, data_type, is_identity FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`, name)
		if err != nil {
			return nil, fmt.Errorf("table %s on PostgreSQL: %w", name, err)
		}
		pg := map[string]string{}
		t := copyTable{name: name}
		var pgOnly []struct{ col, typ string }
		for rows.Next() {
			var col, typ, identity string
			if err := rows.Scan(&col, &typ, &identity); err != nil {
				rows.Close()
				return nil, err
			}
			pg[col] = typ
			// SQLite's implicit rowid is PostgreSQL's rowid identity
			// (pgschema.go): the events' order, kept.
			if col == "rowid" && identity == "YES" && !slices.Contains(lite, col) {
				pgOnly = append(pgOnly, struct{ col, typ string }{col, typ})
				t.identity = append(t.identity, col)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(pg) == 0 {
			return nil, fmt.Errorf("table %s of the SQLite store is not in the PostgreSQL schema: its rows would be lost (copy with the podhub release that wrote the SQLite file)", name)
		}
		for _, col := range lite {
			typ, ok := pg[col]
			if !ok {
				return nil, fmt.Errorf("column %s of table %s of the SQLite store is not in the PostgreSQL schema: its values would be lost (copy with the podhub release that wrote the SQLite file)", col, name)
			}
			t.cols, t.types = append(t.cols, col), append(t.types, typ)
		}
		for _, c := range pgOnly {
			t.cols, t.types = append(t.cols, c.col), append(t.types, c.typ)
		}
		out = append(out, t)
	}
	return out, nil
}

// CopiedTables are the tables of the SQLite store q reads that
// CopyStore copies, by name: all but SQLite's own and CopySkipped's.
func CopiedTables(ctx context.Context, q querier) ([]string, error) {
	all, err := strings1(ctx, q, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("the SQLite store's tables: %w", err)
	}
	return slices.DeleteFunc(all, func(name string) bool {
		_, skipped := CopySkipped[name]
		return skipped || strings.HasPrefix(name, "sqlite_")
	}), nil
}

// freshRows are the rows a freshly made store holds, by table (a
// counter's first row): what an empty target may hold.
func freshRows(tables []copyTable) (map[string][]string, error) {
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database: one connection
	if err := migrate(db, sqldb.SQLite, fleetMigrations); err != nil {
		return nil, fmt.Errorf("a fresh fleet schema: %w", err)
	}
	out := map[string][]string{}
	for _, t := range tables {
		rows, err := TableRows(context.Background(), db, t.name, t.cols)
		if err != nil {
			return nil, fmt.Errorf("a fresh fleet schema's table %s: %w", t.name, err)
		}
		out[t.name] = rows
	}
	return out, nil
}

// copyRows copies table t's rows from stx (SQLite) to tx (PostgreSQL),
// batch rows an INSERT, and returns how many it read.
func copyRows(ctx context.Context, tx, stx *sql.Tx, t copyTable, batch int) (int64, error) {
	batch = min(batch, maxParams/len(t.cols))
	quoted := make([]string, len(t.cols))
	for i, c := range t.cols {
		quoted[i] = quoteIdent(c)
	}
	head := `INSERT INTO ` + quoteIdent(t.name) + ` (` + strings.Join(quoted, ", ") + `)`
	if len(t.identity) > 0 {
		head += ` OVERRIDING SYSTEM VALUE`
	}
	head += ` VALUES `
	one := `(` + strings.TrimSuffix(strings.Repeat("?, ", len(t.cols)), ", ") + `)`
	insert := func(args []any) error {
		n := len(args) / len(t.cols)
		_, err := tx.ExecContext(ctx, head+strings.TrimSuffix(strings.Repeat(one+", ", n), ", "), args...)
		return err
	}
	rows, err := stx.QueryContext(ctx, `SELECT `+strings.Join(quoted, ", ")+` FROM `+quoteIdent(t.name))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	vals := make([]any, len(t.cols))
	ptrs := make([]any, len(t.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	args := make([]any, 0, batch*len(t.cols))
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		n++
		for i, v := range vals {
			pv, err := toPostgres(v, t.types[i])
			if err != nil {
				return n, fmt.Errorf("row %d, column %s: %w", n, t.cols[i], err)
			}
			args = append(args, pv)
		}
		if len(args) == cap(args) {
			if err := insert(args); err != nil {
				return n, err
			}
			args = args[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	if len(args) > 0 {
		if err := insert(args); err != nil {
			return n, err
		}
	}
	return n, nil
}

// toPostgres is an SQLite value as the PostgreSQL column of type typ
// takes it: SQLite keeps a BLOB column's text default ('{}') as text,
// which bytea must get as its bytes (pgx would read a string as bytea's
// escaped text form); an INTEGER column holds 64-bit integers, as
// BIGINT does. Flags are 0/1 integers on both (pgschema.go).
func toPostgres(v any, typ string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch typ {
	case "bytea":
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		}
		return nil, fmt.Errorf("%T %v in a bytea column", v, v)
	case "bigint", "integer", "smallint":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
				return int64(x), nil
			}
		}
		return nil, fmt.Errorf("%T %v in an integer column", v, v)
	case "text":
		if b, ok := v.([]byte); ok {
			return string(b), nil
		}
	}
	return v, nil
}

// TableRows are the rows of table (its columns cols: rowid names
// SQLite's implicit one) as one line of text each, sorted: values as
// both engines mean them (text and bytes alike, as bytea keeps SQLite's
// text in a BLOB column), so that two stores' rows compare equal when
// they hold the same fleet.
func TableRows(ctx context.Context, q querier, table string, cols []string) ([]string, error) {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = quoteIdent(c)
	}
	rows, err := q.QueryContext(ctx, `SELECT `+strings.Join(quoted, ", ")+` FROM `+quoteIdent(table))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var out []string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		line := make([]string, len(vals))
		for i, v := range vals {
			line[i] = canonical(v)
		}
		out = append(out, strings.Join(line, ", "))
	}
	slices.Sort(out)
	return out, rows.Err()
}

// canonical is a value as TableRows shows it.
func canonical(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.Itoa(boolInt(x))
	case string:
		return strconv.Quote(x)
	case []byte:
		return strconv.Quote(string(x))
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// strings1 is the one text column of query's rows.
func strings1(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// querier is a database or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// quoteIdent is name as a quoted identifier, read alike by both engines.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
