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
