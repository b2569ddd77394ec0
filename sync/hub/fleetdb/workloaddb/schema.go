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
