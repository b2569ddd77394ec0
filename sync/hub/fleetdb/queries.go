package fleetdb

// The report paths' and desired documents' queries, prepared when the
// fleet opens.
var (
	qTouch        = `UPDATE devices SET last_seen = MAX(last_seen, ?) WHERE id = ?`
	qCursor       = `SELECT epoch, seq FROM cursors WHERE device = ?`
	qDropMirrors  = `DELETE FROM mirrors WHERE device = ?`
	qCountMirrors = `SELECT COUNT(*) FROM mirrors WHERE device = ?`
	qInsertEvent  = `INSERT INTO events (device, seq, key, event, at) VALUES (?, ?, ?, ?, ?)`
	qDeleteMirror = `DELETE FROM mirrors WHERE device = ? AND key = ?`
	// A status replaces a mirror only with a higher seq; a new mirror is
	// inserted only while the device is under its bound (reports.go).
	qUpdateMirror = `UPDATE mirrors SET seq = ?, pod = ? WHERE device = ? AND key = ? AND seq < ?`
	qInsertMirror = `INSERT INTO mirrors (device, key, seq, pod) VALUES (?, ?, ?, ?) ON CONFLICT(device, key) DO NOTHING`
	qUpsertCursor = `INSERT INTO cursors (device, epoch, seq) VALUES (?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq`
	qPublished = `SELECT COALESCE(MAX(generation), 0) FROM desired WHERE device = ?`
	qObserved  = `SELECT observed FROM acks WHERE device = ?`
	qUpsertAck = `INSERT INTO acks (device, generation, observed, error, results) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, observed = excluded.observed,
		error = excluded.error, results = excluded.results`
	qOnline        = `UPDATE devices SET online = ? WHERE id = ?`
	qNode          = `SELECT node FROM devices WHERE id = ?`
	qSaveNode      = `UPDATE devices SET version = ?, node = ?, device_labels = ?, net = ? WHERE id = ?`
	qInstance      = `SELECT instance, prev_instance, instance_since, duplicate_until FROM devices WHERE id = ?`
	qFirstInstance = `UPDATE devices SET instance = ?, instance_since = ? WHERE id = ?`
	qDesired       = `SELECT generation, pods, document FROM desired WHERE device = ?`
	qUpsertDesired = `INSERT INTO desired (device, generation, pods, document) VALUES (?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, pods = excluded.pods, document = excluded.document`
	qAddDevice      = `INSERT INTO devices (id) VALUES (?) ON CONFLICT(id) DO NOTHING`
	qSwitchInstance = `UPDATE devices SET prev_instance = ?, instance = ?, instance_since = ?, duplicate_until = ? WHERE id = ?`
)

// preparedQueries are prepared at Open (with the only connection
// free: a statement cannot be prepared outside a transaction that holds it).
var preparedQueries = []string{qTouch, qCursor, qDropMirrors, qCountMirrors, qInsertEvent,
	qDeleteMirror, qUpdateMirror, qInsertMirror, qUpsertCursor, qPublished, qObserved, qUpsertAck,
	qOnline, qNode, qSaveNode, qInstance, qFirstInstance, qSwitchInstance, qDesired, qUpsertDesired, qAddDevice}
