package objectdb

// Tables are the ConfigMaps and Secrets applied at the hub, as the fleet
// database's migration made them (fleetdb runs it; the text must stay as
// it is once released). A row's clear columns are what a list shows and
// what a device's index names; object is the object's JSON, a Secret's
// sealed (AES-256-GCM, nonce first) under the key key_id names (empty
// for a ConfigMap, stored in clear). version is the objects' one counter of
// resourceVersions, so that a version is never given twice.
const Tables = `CREATE TABLE config_objects (
		kind      TEXT NOT NULL,
		namespace TEXT NOT NULL,
		name      TEXT NOT NULL,
		uid       TEXT NOT NULL,
		version   INTEGER NOT NULL,
		created   INTEGER NOT NULL,
		immutable INTEGER NOT NULL DEFAULT 0,
		type      TEXT NOT NULL DEFAULT '',
		keys      INTEGER NOT NULL DEFAULT 0,
		key_id    TEXT NOT NULL DEFAULT '',
		object    BLOB NOT NULL,
		PRIMARY KEY (kind, namespace, name)
	);
	CREATE TABLE config_object_version (last INTEGER NOT NULL);
	INSERT INTO config_object_version VALUES (0);
`

// PGTables are Tables on PostgreSQL, as the fleet store's first
// PostgreSQL migration makes them (fleetdb's pgMigrations), in
// PostgreSQL's types; the text must stay as it is once released.
const PGTables = `
CREATE TABLE config_objects (
	kind      TEXT COLLATE "C" NOT NULL,
	namespace TEXT COLLATE "C" NOT NULL,
	name      TEXT COLLATE "C" NOT NULL,
	uid       TEXT COLLATE "C" NOT NULL,
	version   BIGINT NOT NULL,
	created   BIGINT NOT NULL,
	immutable BIGINT NOT NULL DEFAULT 0,
	type      TEXT COLLATE "C" NOT NULL DEFAULT '',
	keys      BIGINT NOT NULL DEFAULT 0,
	key_id    TEXT COLLATE "C" NOT NULL DEFAULT '',
	object    BYTEA NOT NULL,
	PRIMARY KEY (kind, namespace, name)
);
CREATE TABLE config_object_version (last BIGINT NOT NULL);
INSERT INTO config_object_version VALUES (0);
`
