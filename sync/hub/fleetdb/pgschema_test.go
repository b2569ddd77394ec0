package fleetdb

import (
	"database/sql"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
)

// PostgreSQL's schema has the tables and columns SQLite's migrations
// leave, of the matching types (INTEGER is bigint, BLOB bytea; and a
// rowid where SQLite's is implicit), so a migration added to one list and
// not the other fails here.
func TestPostgresSchemaMatchesSQLite(t *testing.T) {
	lite := testFleet(t)
	pg, err := OpenStore(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	want := columns(t, lite.db, `SELECT m.name, c.name || ' ' || CASE c.type WHEN 'INTEGER' THEN 'bigint' WHEN 'BLOB' THEN 'bytea' ELSE lower(c.type) END
		FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table'`)
	got := columns(t, pg.db, `SELECT table_name, column_name || ' ' || data_type FROM information_schema.columns WHERE table_schema = current_schema()`)
	for _, table := range []string{"events", "sched_events"} {
		want[table] = append(want[table], "rowid bigint")
		slices.Sort(want[table])
	}
	// The versions' tables, made by the migrations' own code on both
	// (INTEGER: a schema version fits PostgreSQL's 32 bits).
	want["fleet_schema"] = []string{"version integer"}
	want["schema_floor"] = []string{"floor integer", "name text"}
	for _, table := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(got[table], want[table]) {
			t.Errorf("table %s: PostgreSQL has columns %v, SQLite %v", table, got[table], want[table])
		}
	}
	for table := range got {
		if _, ok := want[table]; !ok {
			t.Errorf("table %s is on PostgreSQL only", table)
		}
	}
}

// columns is each table's columns, sorted.
func columns(t *testing.T, db *sql.DB, query string) map[string][]string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(table, "sqlite_") {
			out[table] = append(out[table], column)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, cols := range out {
		slices.Sort(cols)
	}
	return out
}

// Two replicas starting together on a fresh store both open it: one
// migrates, the other waits for it and finds nothing left to do.
func TestReplicasMigrateAFreshStoreTogether(t *testing.T) {
	for round := range 3 {
		url := pgtest.URL(t)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				f, err := OpenStore(url)
				if err == nil {
					err = f.Close()
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a replica opening a fresh store beside another: %v", round, err)
			}
		}
	}
}
