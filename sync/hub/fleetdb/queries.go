package fleetdb

// The report paths' and desired documents' queries, prepared when the
// fleet opens.
var (
	qTouch        = `UPDATE devices SET last_seen = CASE WHEN last_seen > ?1 THEN last_seen ELSE ?1 END WHERE id = ?2`
	qCursor       = `SELECT epoch, seq FROM cursors WHERE device = ?`
	qDropMirrors  = `DELETE FROM mirrors WHERE device = ?`
	qCountMirrors = `SELECT COUNT(*) FROM mirrors WHERE device = ?`
	qInsertEvent  = `INSERT INTO events (device, seq, key, event, at) VALUES (?, ?, ?, ?, ?)`
	qDeleteMirror = `DELETE FROM mirrors WHERE device = ? AND key = ?`
	// A status replaces a mirror only with a higher seq; a new mirror is
	// inserted only while the device is under its bound (reports.go).
	// Its summary (summary.go) goes with it. The first update is the
	// common case, a status whose summary is as stored; the second one
	// changes it (ready_since stays while the pod stays Ready, summary_at
	// is when Ready, the phase or the failure last changed).
	qUpdateMirror = `UPDATE mirrors SET seq = ?1, pod = ?2, restarts = ?7
		WHERE device = ?3 AND key = ?4 AND seq < ?1 AND ready = ?5 AND phase = ?6 AND failure = ?8`
	qUpdateMirrorSummary = `UPDATE mirrors SET seq = ?1, pod = ?2, summary_at = ?9,
		ready_since = CASE WHEN ?5 = 0 THEN 0 WHEN ready = 1 THEN ready_since ELSE ?9 END,
		ready = ?5, phase = ?6, restarts = ?7, failure = ?8
		WHERE device = ?3 AND key = ?4 AND seq < ?1`
	qInsertMirror = `INSERT INTO mirrors (device, key, seq, pod, ready, ready_since, phase, restarts, failure, summary_at, scheduled)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(device, key) DO NOTHING`
	qUpsertCursor = `INSERT INTO cursors (device, epoch, seq) VALUES (?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq`
	qPublished = `SELECT COALESCE(MAX(generation), 0) FROM desired WHERE device = ?`
	qObserved  = `SELECT observed FROM acks WHERE device = ?`
	qUpsertAck = `INSERT INTO acks (device, generation, observed, error, results) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, observed = excluded.observed,
		error = excluded.error, results = excluded.results`
	qOnline        = `UPDATE devices SET online = ? WHERE id = ?`
	qNode          = `SELECT node FROM devices WHERE id = ?`
	qSaveNode      = `UPDATE devices SET version = ?, node = ?, device_labels = ?, net = ?, metrics = ? WHERE id = ?`
	qInstance      = `SELECT instance, prev_instance, instance_since, duplicate_until FROM devices WHERE id = ?`
	qFirstInstance = `UPDATE devices SET instance = ?, instance_since = ? WHERE id = ?`
	qDesired       = `SELECT generation, pods, document FROM desired WHERE device = ?`
	qUpsertDesired = `INSERT INTO desired (device, generation, pods, document) VALUES (?, ?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET generation = excluded.generation, pods = excluded.pods, document = excluded.document`
	qAddDevice      = `INSERT INTO devices (id, created) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`
	qSwitchInstance = `UPDATE devices SET prev_instance = ?, instance = ?, instance_since = ?, duplicate_until = ? WHERE id = ?`
)

// preparedQueries are prepared at Open (with the only connection
// free: a statement cannot be prepared outside a transaction that holds it).
var preparedQueries = []string{qTouch, qCursor, qDropMirrors, qCountMirrors, qInsertEvent,
	qDeleteMirror, qUpdateMirror, qUpdateMirrorSummary, qInsertMirror, qUpsertCursor, qPublished, qObserved, qUpsertAck,
	qOnline, qNode, qSaveNode, qInstance, qFirstInstance, qSwitchInstance, qDesired, qUpsertDesired, qAddDevice}
