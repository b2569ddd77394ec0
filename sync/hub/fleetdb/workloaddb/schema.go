package workloaddb

// Tables are the scheduler's tables as the fleet database's migration 4
// made them: fleetdb runs every migration of fleet.db, in order, and this
// text is the first part of that one (it must stay as it is: databases
// migrated before hold it).
const Tables = `CREATE TABLE workloads (
		kind      TEXT NOT NULL,
		namespace TEXT NOT NULL,
		name      TEXT NOT NULL,
		object    BLOB NOT NULL,
		PRIMARY KEY (kind, namespace, name)
	);
	CREATE TABLE hub_pods (
		namespace TEXT NOT NULL,
		name      TEXT NOT NULL,
		device    TEXT NOT NULL DEFAULT '',
		pod       BLOB NOT NULL,
		PRIMARY KEY (namespace, name)
	);
	CREATE TABLE sched_events (
		kind      TEXT NOT NULL,
		namespace TEXT NOT NULL,
		name      TEXT NOT NULL,
		type      TEXT NOT NULL,
		reason    TEXT NOT NULL,
		message   TEXT NOT NULL,
		count     INTEGER NOT NULL,
		first     INTEGER NOT NULL,
		last      INTEGER NOT NULL
	);
	CREATE INDEX sched_events_by_object ON sched_events(kind, namespace, name);
`

// PGTables are the scheduler's tables on PostgreSQL as the fleet store's
// first PostgreSQL migration makes them (fleetdb's pgMigrations): those
// of Tables and RolloutTables as SQLite's migrations leave them, in
// PostgreSQL's types (BIGINT, BYTEA, TEXT sorting by bytes), with a rowid
// identity where SQLite's rowid orders the rows. Like Tables, the text
// must stay as it is once released.
const PGTables = `
CREATE TABLE workloads (
	kind      TEXT COLLATE "C" NOT NULL,
	namespace TEXT COLLATE "C" NOT NULL,
	name      TEXT COLLATE "C" NOT NULL,
	object    BYTEA NOT NULL,
	status    BYTEA,
	PRIMARY KEY (kind, namespace, name)
);
CREATE TABLE hub_pods (
	namespace TEXT COLLATE "C" NOT NULL,
	name      TEXT COLLATE "C" NOT NULL,
	device    TEXT COLLATE "C" NOT NULL DEFAULT '',
	pod       BYTEA NOT NULL,
	PRIMARY KEY (namespace, name)
);
CREATE TABLE sched_events (
	rowid     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	kind      TEXT COLLATE "C" NOT NULL,
	namespace TEXT COLLATE "C" NOT NULL,
	name      TEXT COLLATE "C" NOT NULL,
	type      TEXT COLLATE "C" NOT NULL,
	reason    TEXT COLLATE "C" NOT NULL,
	message   TEXT COLLATE "C" NOT NULL,
	count     BIGINT NOT NULL,
	first     BIGINT NOT NULL,
	last      BIGINT NOT NULL
);
CREATE INDEX sched_events_by_object ON sched_events(kind, namespace, name);
CREATE TABLE revisions (
	kind         TEXT COLLATE "C" NOT NULL,
	namespace    TEXT COLLATE "C" NOT NULL,
	name         TEXT COLLATE "C" NOT NULL,
	hash         TEXT COLLATE "C" NOT NULL,
	number       BIGINT NOT NULL,
	template     BYTEA,
	change_cause TEXT COLLATE "C" NOT NULL DEFAULT '',
	halted       TEXT COLLATE "C" NOT NULL DEFAULT '',
	PRIMARY KEY (kind, namespace, name, hash)
);
`
