package sqldb

import (
	"database/sql"
	"errors"
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
// leaving those inside what PostgreSQL does not read as SQL as they are:
// quoted strings ('…', E'…' with its backslash escapes), quoted
// identifiers ("…"), dollar-quoted bodies ($$…$$, $tag$…$tag$), line
// comments (--) and block comments (/* */, which nest). A query written
// with $n has no ? outside quotes and comes back unchanged.
func Rebind(query string) string {
	if strings.IndexByte(query, '?') < 0 {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); {
		c := query[i]
		if end := quotedEnd(query, i); end > i {
			b.WriteString(query[i:end])
			i = end
			continue
		}
		if c != '?' {
			b.WriteByte(c)
			i++
			continue
		}
		// ?NNN is SQLite's numbered placeholder, PostgreSQL's $NNN; a
		// plain ? takes the number after the largest so far, as SQLite
		// numbers it.
		j := i + 1
		for j < len(query) && query[j] >= '0' && query[j] <= '9' {
			j++
		}
		b.WriteByte('$')
		if j > i+1 {
			if k, err := strconv.Atoi(query[i+1 : j]); err == nil && k > n {
				n = k
			}
			b.WriteString(query[i+1 : j])
		} else {
			n++
			b.WriteString(strconv.Itoa(n))
		}
		i = j
	}
	return b.String()
}

// quotedEnd is the end of the quoted string, quoted identifier,
// dollar-quoted body or comment that starts at query[i] (the end of the
// query if it is not closed: the server says what is wrong), or i when
// none starts there.
func quotedEnd(query string, i int) int {
	rest := query[i:]
	switch {
	case rest[0] == '\'':
		// An escape string (E'…') takes backslash escapes: \' does not
		// end it.
		escapes := i > 0 && (query[i-1] == 'E' || query[i-1] == 'e') && (i < 2 || !identChar(query[i-2]))
		for j := 1; j < len(rest); j++ {
			switch {
			case escapes && rest[j] == '\\':
				j++
			case rest[j] == '\'':
				// A doubled quote inside is two quoted runs back to back.
				return i + j + 1
			}
		}
		return len(query)
	case rest[0] == '"':
		if j := strings.IndexByte(rest[1:], '"'); j >= 0 {
			return i + j + 2
		}
		return len(query)
	case strings.HasPrefix(rest, "--"):
		if j := strings.IndexByte(rest, '\n'); j >= 0 {
			return i + j + 1
		}
		return len(query)
	case strings.HasPrefix(rest, "/*"):
		depth := 0
		for j := 0; j+1 < len(rest); j++ {
			switch {
			case rest[j] == '/' && rest[j+1] == '*':
				depth++
				j++
			case rest[j] == '*' && rest[j+1] == '/':
				depth--
				j++
				if depth == 0 {
					return i + j + 1
				}
			}
		}
		return len(query)
	case rest[0] == '$' && (i == 0 || !identChar(query[i-1])):
		// $tag$ opens a body closed by the same $tag$; the tag is an
		// identifier without $ (or empty). $1 is a parameter, and a $
		// inside an identifier (a$b) is part of it.
		j := 1
		for j < len(rest) && rest[j] != '$' && identChar(rest[j]) && !(j == 1 && rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		if j >= len(rest) || rest[j] != '$' {
			return i
		}
		tag := rest[:j+1]
		if k := strings.Index(rest[len(tag):], tag); k >= 0 {
			return i + len(tag) + k + len(tag)
		}
		return len(query)
	}
	return i
}

// identChar reports whether c may be part of an unquoted identifier or
// keyword (letters, digits, _, $ and every byte of a non-ASCII letter).
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// LockTimedOut says whether err is PostgreSQL's lock_not_available
// (SQLSTATE 55P03: a lock_timeout ran out), as the driver reports it.
func LockTimedOut(err error) bool {
	var coded interface{ SQLState() string }
	return errors.As(err, &coded) && coded.SQLState() == "55P03"
}
