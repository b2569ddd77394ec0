package fleetdb

import (
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/replica"
)

// pgMigrations are the fleet store's schema versions on PostgreSQL, a
// history of their own (SQLite's are fleetMigrations): the first is the
// whole schema as SQLite's fleetMigrations leave it, in PostgreSQL's
// types. A later change to the schema adds a migration to both lists
// (TestPostgresSchemaMatchesSQLite fails on one added to one list only).
//
// The types keep SQLite's semantics: INTEGER is 64 bits there, so
// BIGINT; BLOB is BYTEA; TEXT sorts by its bytes as SQLite's BINARY
// collation does (COLLATE "C", whatever the database's locale); flags
// stay 0/1 integers. The tables SQLite's rowid orders (events,
// sched_events) have a rowid column of their own, an identity, so the
// queries naming rowid are the same on both. json_of reads a BYTEA
// column's JSON for the few queries that look inside it. The tables of
// workloaddb and objectdb are theirs (PGTables), as on SQLite.
var pgMigrations = []string{pgSchema1 + workloaddb.PGTables + objectdb.PGTables,
	// Replicas: the podhub processes on the store and the leader lease
	// with its fencing token (sync/hub/replica).
	replica.PGTables,
	// Each replica process's nonce, on its row and the lease's: two
	// processes given one replica ID never both lead.
	replica.PGNonces,
	// Device ownership: which replica handles each bucket of devices'
	// reports (sync/hub/replica, owners.go).
	replica.PGOwnerTables,
}

const pgSchema1 = `
CREATE FUNCTION json_of(b BYTEA) RETURNS JSONB
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	AS $$ SELECT convert_from(b, 'UTF8')::jsonb $$;
CREATE TABLE devices (
	id               TEXT COLLATE "C" PRIMARY KEY,
	labels           BYTEA NOT NULL DEFAULT '{}',
	online           BIGINT NOT NULL DEFAULT 0,
	last_seen        BIGINT NOT NULL DEFAULT 0,
	version          TEXT COLLATE "C" NOT NULL DEFAULT '',
	node             BYTEA,
	device_labels    BYTEA NOT NULL DEFAULT '{}',
	instance         TEXT COLLATE "C" NOT NULL DEFAULT '',
	prev_instance    TEXT COLLATE "C" NOT NULL DEFAULT '',
	instance_since   BIGINT NOT NULL DEFAULT 0,
	duplicate_until  BIGINT NOT NULL DEFAULT 0,
	net              BYTEA,
	unschedulable    BIGINT NOT NULL DEFAULT 0,
	taints           BYTEA NOT NULL DEFAULT '[]',
	fenced_at        BIGINT NOT NULL DEFAULT 0,
	fence            BYTEA NOT NULL DEFAULT '[]',
	fence_generation BIGINT NOT NULL DEFAULT 0,
	revoked_at       BIGINT NOT NULL DEFAULT 0,
	metrics          BYTEA,
	created          BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE desired (
	device     TEXT COLLATE "C" PRIMARY KEY,
	generation BIGINT NOT NULL,
	pods       BYTEA NOT NULL,
	document   BYTEA NOT NULL
);
CREATE TABLE acks (
	device     TEXT COLLATE "C" PRIMARY KEY,
	generation BIGINT NOT NULL,
	observed   BIGINT NOT NULL,
	error      TEXT COLLATE "C" NOT NULL,
	results    BYTEA NOT NULL
);
CREATE TABLE mirrors (
	device      TEXT COLLATE "C" NOT NULL,
	key         TEXT COLLATE "C" NOT NULL,
	seq         BIGINT NOT NULL,
	pod         BYTEA NOT NULL,
	ready       BIGINT NOT NULL DEFAULT 0,
	ready_since BIGINT NOT NULL DEFAULT 0,
	phase       TEXT COLLATE "C" NOT NULL DEFAULT '',
	restarts    BIGINT NOT NULL DEFAULT 0,
	failure     TEXT COLLATE "C" NOT NULL DEFAULT '',
	summary_at  BIGINT NOT NULL DEFAULT 0,
	scheduled   BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (device, key)
);
CREATE INDEX mirrors_scheduled ON mirrors(device, key) WHERE scheduled = 1;
CREATE TABLE events (
	rowid  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	device TEXT COLLATE "C" NOT NULL,
	seq    BIGINT NOT NULL,
	key    TEXT COLLATE "C" NOT NULL,
	event  BYTEA NOT NULL,
	at     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX events_device ON events(device, seq);
CREATE INDEX events_by_device ON events(device, rowid);
CREATE TABLE cursors (
	device TEXT COLLATE "C" PRIMARY KEY,
	epoch  TEXT COLLATE "C" NOT NULL,
	seq    BIGINT NOT NULL
);
CREATE TABLE releases (
	kind     TEXT COLLATE "C" NOT NULL,
	name     TEXT COLLATE "C" NOT NULL,
	version  TEXT COLLATE "C" NOT NULL,
	manifest BYTEA NOT NULL,
	key_id   TEXT COLLATE "C" NOT NULL,
	created  BIGINT NOT NULL,
	PRIMARY KEY (name, version)
);
CREATE TABLE updates (
	name    TEXT COLLATE "C" PRIMARY KEY,
	release TEXT COLLATE "C" NOT NULL,
	version TEXT COLLATE "C" NOT NULL,
	spec    BYTEA NOT NULL,
	status  BYTEA NOT NULL DEFAULT '{}',
	active  BIGINT NOT NULL DEFAULT 1,
	created BIGINT NOT NULL
);
CREATE TABLE update_orders (
	device      TEXT COLLATE "C" PRIMARY KEY,
	id          BIGINT NOT NULL,
	update_name TEXT COLLATE "C" NOT NULL,
	document    BYTEA NOT NULL,
	at          BIGINT NOT NULL
);
CREATE TABLE update_states (
	device TEXT COLLATE "C" PRIMARY KEY,
	state  BYTEA NOT NULL,
	at     BIGINT NOT NULL
);
CREATE TABLE device_objects (
	device          TEXT COLLATE "C" PRIMARY KEY,
	seal_key        BYTEA,
	seal_key_source TEXT COLLATE "C" NOT NULL DEFAULT '',
	seal_key_at     BIGINT NOT NULL DEFAULT 0,
	refused_key     TEXT COLLATE "C" NOT NULL DEFAULT '',
	refused_at      BIGINT NOT NULL DEFAULT 0,
	generation      BIGINT NOT NULL DEFAULT 0,
	entries         BYTEA NOT NULL DEFAULT '[]',
	document        BYTEA,
	omitted         BYTEA NOT NULL DEFAULT '[]'
);`
