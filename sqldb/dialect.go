package sqldb

import (
	"database/sql"
	"strconv"
	"strings"
)

// Dialect is the SQL engine a database speaks: SQLite (the default, every
// database of the device and the hub's fleet.db) or PostgreSQL (the
// hub's fleet store when podhub.yaml names one). Queries are written
// once, in the SQL both accept, with SQLite's ? placeholders (the
// PostgreSQL connection rewrites them, see Rebind); where the engines
// differ (JSON functions, rowid, the catalog) the two texts stand side
// by side and Pick chooses.
type Dialect int

const (
	// SQLite is modernc.org/sqlite: one connection, immediate
	// transactions.
	SQLite Dialect = iota
	// Postgres is PostgreSQL through pgx: many connections, each write
	// transaction holding the store's writer lock (sqldb/postgres).
	Postgres
)

// String names the dialect as a store URL's scheme does.
func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// Pick returns the query text for the dialect: sqlite's on SQLite,
// postgres's on PostgreSQL.
func (d Dialect) Pick(sqlite, postgres string) string {
	if d == Postgres {
		return postgres
	}
	return sqlite
}

// DB is a database with the dialect its queries must be written in: what
// the fleet database hands the owners of its other tables (workloaddb,
// objectdb), which run their own queries on it.
type DB struct {
	*sql.DB
	Dialect Dialect
}

// Rebind rewrites SQLite's ? placeholders as PostgreSQL's $1, $2, … in
// order, and its numbered ?NNN (an argument used twice) as $NNN,
// leaving those inside quoted strings, quoted identifiers and comments
// as they are. A query written with $n has no ? outside quotes and comes
// back unchanged.
func Rebind(query string) string {
	if strings.IndexByte(query, '?') < 0 {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			// A quoted string or identifier: copied to its closing quote
			// (a doubled quote inside is two quoted runs back to back).
			j := strings.IndexByte(query[i+1:], c)
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j+2])
			i += j + 1
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j+1])
			i += j
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			j := strings.Index(query[i+2:], "*/")
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j+4])
			i += j + 3
		case c == '?':
			// ?NNN is SQLite's numbered placeholder, PostgreSQL's $NNN; a
			// plain ? takes the number after the largest so far, as
			// SQLite numbers it.
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j > i+1 {
				if k, err := strconv.Atoi(query[i+1 : j]); err == nil && k > n {
					n = k
				}
				b.WriteByte('$')
				b.WriteString(query[i+1 : j])
				i = j - 1
				continue
			}
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
