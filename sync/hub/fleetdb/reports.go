package fleetdb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// What the hub believes of a device's reports: nothing the device could
// not have sent. Reports from unknown devices are refused; a status batch
// must follow the cursor; an ack must answer a generation the hub
// published; a device sets only its own labels.

// DuplicateWindow is how long two instances alternating under one ID
// count as two devices sharing it, from the last switch.
const DuplicateWindow = 10 * time.Minute

// ApplyStatus stores a status batch exactly once in effect. Items follow
// the batch's after with no gap (the decoder checks it). Items at or
// below the device's cursor are duplicates (QoS 1 redelivery, a resend
// after a lost receipt) and are skipped; the rest and the new cursor are
// written in one transaction. It returns the cursor, which the hub sends
// back as the device's receipt, and how many items were new.
//
// A batch that follows a sequence number past the cursor means one was
// missed: nothing is stored, and gap asks the device to resend from the
// cursor. A new epoch (a new outbox on the device) is taken only from its
// start (after 0): it replaces the device's mirrors, since a new epoch
// reports every pod again. A batch of another epoch that does not start
// there gets a gap at 0, and the device starts a new epoch.
func (f *Fleet) ApplyStatus(b *protocol.StatusBatch, at time.Time) (cursor int64, applied int, gap bool, err error) {
	r, err := f.StoreStatus(b, at)
	return r.Cursor, r.Applied, r.Gap, err
}

// StatusStored is what storing a status batch did.
type StatusStored struct {
	// Cursor is the device's receipt; Applied counts the new items; Gap
	// asks the device to resend from the cursor.
	Cursor  int64
	Applied int
	Gap     bool
	// HubPodsChanged: the batch changed what the controllers read of a
	// hub-scheduled pod (Ready, phase, failure), or removed a mirror, or
	// started a new epoch: a scheduling pass may decide otherwise now.
	HubPodsChanged bool
}

// StoreStatus is ApplyStatus, saying also whether the batch changed
// what the scheduler reads of the hub's pods.
func (f *Fleet) StoreStatus(b *protocol.StatusBatch, at time.Time) (StatusStored, error) {
	defer f.changes.Deliver(b.Device, fleetwatch.Pods|fleetwatch.Events)
	var none StatusStored
	tx, err := f.beginDevice(b.Device)
	if err != nil {
		return none, err
	}
	defer tx.Rollback()
	var r StatusStored
	var epoch string
	var mirrors int // the device's mirrors: counted on PostgreSQL, -1 on SQLite
	err = f.touchCursor(tx, b.Device, at, &epoch, &r.Cursor, &mirrors)
	if errors.Is(err, ErrUnknownDevice) {
		return none, err
	}
	switch {
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return none, err
	case err != nil || epoch != b.Epoch:
		if b.After != 0 {
			return StatusStored{Gap: true}, nil
		}
		if _, err := f.stmts.Exec(tx, qDropMirrors, b.Device); err != nil {
			return none, err
		}
		f.forgetMirrorCount(b.Device)
		mirrors = 0
		r.Cursor, r.HubPodsChanged = 0, true
	case b.After > r.Cursor:
		return StatusStored{Cursor: r.Cursor, Gap: true}, nil // a batch is missing before this one
	}
	// The device's mirrors, for the bound on made-up pods. On SQLite
	// (one podhub) counted once, then kept by this, their only writer,
	// as each batch commits (read while this transaction holds the
	// fleet's one connection). On PostgreSQL touchCursor counted them in
	// its round trip, under the device's lock: a count kept in memory
	// goes stale when another replica stores the device's batches (its
	// bucket moved there and back), and a stale 0 would skip reading the
	// stored mirrors (storeItemsBatched) and take every pod as new.
	if mirrors < 0 {
		var counted bool
		if mirrors, counted = f.mirrorCount(b.Device); !counted {
			if err := f.stmts.QueryRow(tx, qCountMirrors, []any{b.Device}, &mirrors); err != nil {
				return none, err
			}
		}
	}
	var events int
	var itemsChanged bool
	if r.Cursor, r.Applied, events, mirrors, itemsChanged, err = f.storeItems(tx, b, r.Cursor, mirrors, at); err != nil {
		return none, err
	}
	r.HubPodsChanged = r.HubPodsChanged || itemsChanged
	if _, err := f.stmts.Exec(tx, qUpsertCursor, b.Device, b.Epoch, r.Cursor); err != nil {
		return none, err
	}
	if events > 0 {
		if err := f.prune(tx, b.Device, at); err != nil {
			return none, err
		}
	}
	// Kept before the commit releases the connection to the next batch.
	if f.dialect != sqldb.Postgres {
		f.keepMirrorCount(b.Device, mirrors)
	}
	if err := f.commit(tx, fleetwatch.Note{Device: b.Device, What: fleetwatch.Pods | fleetwatch.Events}); err != nil {
		f.forgetMirrorCount(b.Device)
		return none, err
	}
	return r, nil
}

// storeItems stores a batch's items past the cursor: events, removed
// pods and pods' statuses, within the device's bound on mirrors. It
// returns the new cursor, how many items were new, how many of them were
// events, the device's mirrors after, and whether a hub pod's summary
// changed or a mirror went.
func (f *Fleet) storeItems(tx *sql.Tx, b *protocol.StatusBatch, cursor int64, mirrors int, at time.Time) (_ int64, applied, events, _ int, changed bool, err error) {
	if f.batched(b, cursor) {
		return f.storeItemsBatched(tx, b, cursor, mirrors, at)
	}
	// insertFirst guesses whether the next pod is new here (a new epoch
	// reports every pod again) or already mirrored (a status change).
	insertFirst := mirrors == 0
	for _, it := range b.Items {
		if it.Seq <= cursor {
			continue
		}
		cursor = it.Seq
		applied++
		switch {
		case it.Event != nil:
			ev, _ := json.Marshal(it.Event)
			_, err = f.stmts.Exec(tx, qInsertEvent, b.Device, it.Seq, it.Key, ev, at.UnixMilli())
			events++
		case it.Pod == nil:
			var res sql.Result
			if res, err = f.stmts.Exec(tx, qDeleteMirror, b.Device, it.Key); err == nil {
				n, _ := res.RowsAffected()
				mirrors -= int(n)
				changed = changed || n > 0
			}
		default:
			pod, _ := json.Marshal(it.Pod)
			m := mirrorWrite{device: b.Device, key: it.Key, seq: it.Seq, pod: pod, sum: summarize(it.Pod), at: at.UnixMilli(),
				scheduled: it.Pod.Annotations[AnnotationScheduled] == "true"}
			var added, moved bool
			added, moved, insertFirst, err = f.storeMirror(tx, m, mirrors, insertFirst)
			if added {
				mirrors++
			}
			changed = changed || moved && m.scheduled
		}
		if err != nil {
			return 0, 0, 0, 0, false, err
		}
	}
	return cursor, applied, events, mirrors, changed, nil
}

// mirrorWrite is a pod's status to store, with its summary.
type mirrorWrite struct {
	device, key string
	seq         int64
	pod         []byte
	sum         summary
	at          int64 // the hub's time of the report, in ms
	// scheduled: the hub's scheduler placed the pod (its summary is read).
	scheduled bool
}

// storeMirror stores a pod's status unless the hub has a newer one (a
// higher seq), in one statement when insertFirst guesses right: an
// UPDATE of a known pod, or an INSERT of a new one, which the bound on
// made-up pods refuses at the device's limit of mirrors. It returns
// whether a mirror was added, whether its summary changed (a new one
// counts), and the guess for the next pod.
func (f *Fleet) storeMirror(tx *sql.Tx, m mirrorWrite, mirrors int, insertFirst bool) (added, changed, nextInsertFirst bool, err error) {
	room := f.retention.Mirrors <= 0 || mirrors < f.retention.Mirrors
	s := m.sum
	insert := func() (bool, error) {
		if !room {
			return false, nil // more pods than any device runs: made up
		}
		since := int64(0)
		if s.ready {
			since = m.at
		}
		res, err := f.stmts.Exec(tx, qInsertMirror, m.device, m.key, m.seq, m.pod,
			boolInt(s.ready), since, s.phase, s.restarts, s.failure, m.at, boolInt(m.scheduled))
		if err != nil {
			return false, err
		}
		n, _ := res.RowsAffected()
		return n == 1, nil
	}
	update := func() (updated, changed bool, err error) {
		args := []any{m.seq, m.pod, m.device, m.key, boolInt(s.ready), s.phase, s.restarts, s.failure, m.at}
		// The first names the arguments but the summary's time (?9):
		// PostgreSQL takes no argument a statement does not name.
		for i, q := range []struct {
			query string
			args  []any
		}{{qUpdateMirror, args[:8]}, {qUpdateMirrorSummary, args}} {
			res, err := f.stmts.Exec(tx, q.query, q.args...)
			if err != nil {
				return false, false, err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				return true, i == 1, nil
			}
		}
		return false, false, nil
	}
	if insertFirst {
		if added, err = insert(); err != nil || added {
			return added, added, true, err
		}
		// Known (or refused at the bound): update it if this is newer.
		_, changed, err = update()
		return false, changed, false, err
	}
	updated, changed, err := update()
	if err != nil || updated {
		return false, changed, false, err
	}
	// Unknown, or known with a newer status (which the insert leaves).
	added, err = insert()
	return added, added, added, err
}

// mirrorCount is a device's mirror count as its last committed status
// batch left it; counted is false when unknown.
func (f *Fleet) mirrorCount(device string) (n int, counted bool) {
	f.countsMu.Lock()
	defer f.countsMu.Unlock()
	n, counted = f.counts[device]
	return n, counted
}

func (f *Fleet) forgetMirrorCount(device string) {
	f.countsMu.Lock()
	defer f.countsMu.Unlock()
	delete(f.counts, device)
}

func (f *Fleet) keepMirrorCount(device string, n int) {
	f.countsMu.Lock()
	defer f.countsMu.Unlock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	f.counts[device] = n
}

// Cursor is a device's outbox cursor: its epoch ("" before any) and the
// highest sequence number stored.
func (f *Fleet) Cursor(device string) (epoch string, seq int64, err error) {
	err = f.db.QueryRow(`SELECT epoch, seq FROM cursors WHERE device = ?`, device).Scan(&epoch, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return epoch, seq, err
}

// ErrNotPublished is an ack for a generation the hub never published.
var ErrNotPublished = errors.New("the hub never published this generation")

// SaveAck records a device's answer to its desired document. An ack
// naming a generation above the hub's is refused. regressed says the
// device now observes an older generation than it did (its state was
// reset, or an old document replayed to it): the hub should resync it.
func (f *Fleet) SaveAck(a *protocol.Ack, at time.Time) (regressed bool, err error) {
	defer f.changes.Deliver(a.Device, fleetwatch.Node)
	results, _ := json.Marshal(a.Pods)
	// The device's own rows; what it published (desired) only fleet-wide
	// transactions write, which the device's transaction excludes.
	tx, err := f.beginDevice(a.Device)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if err := f.touch(tx, a.Device, at); err != nil {
		return false, err
	}
	var published int64
	if err := f.stmts.QueryRow(tx, qPublished, []any{a.Device}, &published); err != nil {
		return false, err
	}
	if a.Generation > published || a.ObservedGeneration > published || a.ObservedGeneration < 0 {
		return false, fmt.Errorf("ack for generation %d (observed %d): %w; it published up to %d",
			a.Generation, a.ObservedGeneration, ErrNotPublished, published)
	}
	var before int64
	err = f.stmts.QueryRow(tx, qObserved, []any{a.Device}, &before)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	regressed = err == nil && a.ObservedGeneration < before && a.ObservedGeneration < published
	if _, err := f.stmts.Exec(tx, qUpsertAck, a.Device, a.Generation, a.ObservedGeneration, a.Error, results); err != nil {
		return false, err
	}
	return regressed, f.commit(tx, fleetwatch.Note{Device: a.Device, What: fleetwatch.Node})
}

// ForgetPresence marks every device offline: at the hub's start, the
// retained presence messages (or the devices' reconnections, with a
// broker that kept none) tell again which are online.
func (f *Fleet) ForgetPresence() error {
	defer f.changes.Deliver("", fleetwatch.Node)
	_, err := f.exec(fleetwatch.Note{What: fleetwatch.Node}, `UPDATE devices SET online = 0`)
	return err
}

// SavePresence records a known device going on or off line. duplicate
// says its ID was just found shared by two instances.
func (f *Fleet) SavePresence(device string, p *protocol.Presence, at time.Time) (duplicate bool, err error) {
	defer func() {
		if p.Online {
			f.changes.Heard(device, at)
		} else {
			f.changes.Deliver(device, fleetwatch.Node)
		}
	}()
	tx, err := f.beginDevice(device)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if err := f.touch(tx, device, at); err != nil {
		return false, err
	}
	if duplicate, err = f.seeInstance(tx, device, p.Instance, at); err != nil {
		return false, err
	}
	if _, err := f.stmts.Exec(tx, qOnline, p.Online, device); err != nil {
		return false, err
	}
	note := fleetwatch.Note{Device: device, What: fleetwatch.Node}
	if p.Online {
		note.Heard = at
	}
	return duplicate, f.commit(tx, note)
}

// SaveHeartbeat records a known device's node status and its own labels:
// only those under protocol.DeviceLabelPrefix are kept (as NodeRestriction
// lets a kubelet set only some labels of its Node); dropped names the
// others. duplicate says its ID was just found shared by two instances.
func (f *Fleet) SaveHeartbeat(h *protocol.Heartbeat, at time.Time) (dropped []string, duplicate bool, err error) {
	defer f.changes.Heard(h.Device, at)
	var net []byte // NULL: the device counts nothing (validated by DecodeHeartbeat)
	if h.Net != nil {
		net, _ = json.Marshal(h.Net)
	}
	var metrics []byte // NULL: the device keeps no metrics
	if h.Metrics != nil {
		metrics, _ = json.Marshal(h.Metrics)
	}
	own := map[string]string{}
	for k, v := range h.Labels {
		if !strings.HasPrefix(k, protocol.DeviceLabelPrefix) || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			dropped = append(dropped, k)
			continue
		}
		own[k] = v
	}
	sort.Strings(dropped)
	labels, _ := json.Marshal(own)
	tx, err := f.beginDevice(h.Device)
	if err != nil {
		return dropped, false, err
	}
	defer tx.Rollback()
	if err := f.touch(tx, h.Device, at); err != nil {
		return dropped, false, err
	}
	if duplicate, err = f.seeInstance(tx, h.Device, h.Instance, at); err != nil {
		return dropped, false, err
	}
	var prevNode []byte
	if err := f.stmts.QueryRow(tx, qNode, []any{h.Device}, &prevNode); err != nil {
		return dropped, false, err
	}
	stampConditions(&h.Node, prevNode, at)
	node, _ := json.Marshal(h.Node)
	if _, err := f.stmts.Exec(tx, qSaveNode,
		h.Version, node, labels, net, metrics, h.Device); err != nil {
		return dropped, false, err
	}
	return dropped, duplicate, f.commit(tx, fleetwatch.Note{Device: h.Device, What: fleetwatch.Node, Heard: at})
}

// stampConditions puts the hub's own clock on a heartbeat's node
// conditions, as the node lifecycle controller times a node's health by
// its own observation: a condition keeps the transition time the hub
// stamped while its status stays, and takes at when it changes (or is
// new); its heartbeat time is at. What the device claims is ignored, so
// it cannot choose when the NoExecute taint its Ready condition sets was
// added, nor so when its pods are evicted.
func stampConditions(node *v1.NodeStatus, prevNode []byte, at time.Time) {
	var prev v1.NodeStatus
	if len(prevNode) > 0 {
		json.Unmarshal(prevNode, &prev) // written by SaveHeartbeat
	}
	stamp := metav1.NewTime(at.UTC().Truncate(time.Second))
	for i := range node.Conditions {
		c := &node.Conditions[i]
		c.LastHeartbeatTime, c.LastTransitionTime = stamp, stamp
		for _, p := range prev.Conditions {
			if p.Type == c.Type && p.Status == c.Status && !p.LastTransitionTime.IsZero() {
				c.LastTransitionTime = p.LastTransitionTime
			}
		}
	}
}

// seeInstance follows the installation instances reporting under a
// device ID. One replacing another is a reinstalled device; the previous
// one coming back within DuplicateWindow is two devices sharing the ID
// (a cloned image): duplicate is true when that is first seen, and the
// device is shown DuplicateID, with an event, until the window passes.
func (f *Fleet) seeInstance(tx *sql.Tx, device, instance string, at time.Time) (duplicate bool, err error) {
	if instance == "" {
		return false, nil
	}
	var cur, prev string
	var since, dupUntil int64
	if err := f.stmts.QueryRow(tx, qInstance, []any{device}, &cur, &prev, &since, &dupUntil); err != nil {
		return false, err
	}
	now := at.UnixMilli()
	switch {
	case cur == instance:
		return false, nil
	case cur == "":
		_, err = f.stmts.Exec(tx, qFirstInstance, instance, now, device)
		return false, err
	}
	alternating := instance == prev && now-since < DuplicateWindow.Milliseconds()
	if alternating {
		duplicate = dupUntil < now
		dupUntil = now + DuplicateWindow.Milliseconds()
	}
	if _, err := f.stmts.Exec(tx, qSwitchInstance,
		cur, instance, now, dupUntil, device); err != nil {
		return false, err
	}
	if duplicate {
		err = f.addEvent(tx, device, protocol.Event{Time: at, Type: "Warning", Reason: "DuplicateID",
			Message: fmt.Sprintf("two installations (instances %s and %s) report alternately as device %s: two devices share this ID (a cloned image?); give one of them another device ID", cur, instance, device)}, at)
	}
	return duplicate, err
}

// SaveRejection records a refused message as a Warning event of a known
// device (seq 0: outside its outbox sequence).
func (f *Fleet) SaveRejection(device, reason string, at time.Time) error {
	defer f.changes.Deliver(device, fleetwatch.Events)
	tx, err := f.beginDevice(device)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var known bool
	if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM devices WHERE id = ?)`, device).Scan(&known); err != nil || !known {
		return err
	}
	if err := f.addEvent(tx, device, protocol.Event{Time: at, Type: "Warning", Reason: "MessageRejected", Message: reason}, at); err != nil {
		return err
	}
	return f.commit(tx, fleetwatch.Note{Device: device, What: fleetwatch.Events})
}

// addEvent stores a hub-made event of a device and applies retention.
func (f *Fleet) addEvent(tx *sql.Tx, device string, e protocol.Event, at time.Time) error {
	ev, _ := json.Marshal(e)
	if _, err := tx.Exec(`INSERT INTO events (device, seq, key, event, at) VALUES (?, 0, '', ?, ?)`, device, ev, at.UnixMilli()); err != nil {
		return err
	}
	return f.prune(tx, device, at)
}

// prune keeps a device's newest events within the retention bounds.
func (f *Fleet) prune(tx *sql.Tx, device string, now time.Time) error {
	r := f.retention
	if r.MaxAge > 0 {
		if _, err := tx.Exec(`DELETE FROM events WHERE device = ? AND at > 0 AND at < ?`, device, now.Add(-r.MaxAge).UnixMilli()); err != nil {
			return err
		}
	}
	if r.Events > 0 {
		// All but the newest r.Events: SQLite's "no limit" is -1, PostgreSQL's ALL.
		if _, err := tx.Exec(`DELETE FROM events WHERE device = ? AND rowid IN
			(SELECT rowid FROM events WHERE device = ? ORDER BY rowid DESC LIMIT `+f.dialect.Pick("-1", "ALL")+` OFFSET ?)`, device, device, r.Events); err != nil {
			return err
		}
	}
	return nil
}
