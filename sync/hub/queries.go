package hub

// The report paths' and desired documents' queries, prepared when the
// fleet opens.
var (
	qTouch        = `UPDATE devices SET last_seen = MAX(last_seen, ?) WHERE id = ?`
	qCursor       = `SELECT epoch, seq FROM cursors WHERE device = ?`
	qDropMirrors  = `DELETE FROM mirrors WHERE device = ?`
	qCountMirrors = `SELECT COUNT(*) FROM mirrors WHERE device = ?`
	qInsertEvent  = `INSERT INTO events (device, seq, key, event, at) VALUES (?, ?, ?, ?, ?)`
	qDeleteMirror = `DELETE FROM mirrors WHERE device = ? AND key = ?`
	qMirrorKnown  = `SELECT EXISTS (SELECT 1 FROM mirrors WHERE device = ? AND key = ?)`
	qUpsertMirror = `INSERT INTO mirrors (device, key, seq, pod) VALUES (?, ?, ?, ?)
				ON CONFLICT(device, key) DO UPDATE SET seq = excluded.seq, pod = excluded.pod WHERE excluded.seq > mirrors.seq`
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

// preparedQueries are prepared at OpenFleet (with the only connection
// free: a statement cannot be prepared outside a transaction that holds it).
var preparedQueries = []string{qTouch, qCursor, qDropMirrors, qCountMirrors, qInsertEvent,
	qDeleteMirror, qMirrorKnown, qUpsertMirror, qUpsertCursor, qPublished, qObserved, qUpsertAck,
	qOnline, qNode, qSaveNode, qInstance, qFirstInstance, qSwitchInstance, qDesired, qUpsertDesired, qAddDevice}
