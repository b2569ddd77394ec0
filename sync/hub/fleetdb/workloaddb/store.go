// Package workloaddb owns the scheduler's tables of the fleet database:
// the workloads and PriorityClasses applied (workloads), the pods the hub
// holds with their device (hub_pods), and the scheduler's events about
// them (sched_events). It checks an apply against what is stored, as the
// API server would.
package workloaddb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sqldb"
)

// Store is the scheduler's tables, on the fleet's database.
type Store struct {
	db *sqldb.DB
	// fence, when set, checks in a scheduling pass's transaction that
	// the pass's replica still leads (SetFence).
	fence func(tx *sql.Tx) error
}

// SetFence has StorePods and Forget (the scheduling passes' writes)
// check fence first in their transaction, and store nothing if it fails: with several replicas, a deposed leader's
// late pass is refused (replica.Elector.Fence). Set before the first
// pass.
func (f *Store) SetFence(fence func(tx *sql.Tx) error) { f.fence = fence }

// New is the scheduler's tables in the fleet database db (fleetdb opens
// and migrates it: Fleet.SQL).
func New(db *sqldb.DB) *Store { return &Store{db: db} }

// ErrNotFound is a workload or pod the hub does not hold (the same as
// fleetdb's, for a device: the API answers 404 to both).
var ErrNotFound = errors.New("not found")

// EachHubPod calls fn with every pod the hub holds, as stored (JSON), in
// order of namespace and name; it stops at fn's first error.
func (f *Store) EachHubPod(fn func(k types.NamespacedName, raw []byte) error) error {
	rows, err := f.db.Query(`SELECT namespace, name, pod FROM hub_pods ORDER BY namespace, name`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k types.NamespacedName
		var raw []byte
		if err := rows.Scan(&k.Namespace, &k.Name, &raw); err != nil {
			return err
		}
		if err := fn(k, raw); err != nil {
			return err
		}
	}
	return rows.Err()
}

// PodWrite is a hub pod to store, with the device it is bound to ("":
// none).
type PodWrite struct {
	Key    types.NamespacedName
	Device string
	Raw    json.RawMessage
}

// PodWrites are what one scheduling pass stores: pods written, pods
// forgotten (with their events), and the events it recorded.
type PodWrites struct {
	Put    []PodWrite
	Delete []types.NamespacedName
	Events []SchedEvent
	// PDBs are budgets whose status the pass computed.
	PDBs []*policyv1.PodDisruptionBudget
	// Statuses and Revisions are the workloads' that changed.
	Statuses  []StatusWrite
	Revisions []RevisionSet
}

// StorePods stores a pass's writes in one transaction, its events
// counted at at.
func (f *Store) StorePods(w PodWrites, at time.Time) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if f.fence != nil {
		if err := f.fence(tx); err != nil {
			return err
		}
	}
	for _, k := range w.Delete {
		if _, err := tx.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, k.Namespace, k.Name); err != nil {
			return err
		}
	}
	for _, p := range w.Put {
		if _, err := tx.Exec(`INSERT INTO hub_pods (namespace, name, device, pod) VALUES (?, ?, ?, ?)
			ON CONFLICT(namespace, name) DO UPDATE SET device = excluded.device, pod = excluded.pod`,
			p.Key.Namespace, p.Key.Name, p.Device, []byte(p.Raw)); err != nil {
			return err
		}
	}
	if err := storePDBStatus(tx, f.db.Dialect, w.PDBs); err != nil {
		return err
	}
	if err := storeRollouts(tx, w.Statuses, w.Revisions); err != nil {
		return err
	}
	events, err := newEventWriter(tx)
	if err != nil {
		return err
	}
	defer events.close()
	for _, e := range w.Events {
		if err := events.add(e, at); err != nil {
			return err
		}
	}
	for _, k := range w.Delete {
		if err := forgetEvents(tx, "Pod", k.Namespace, k.Name); err != nil {
			return err
		}
	}
	return tx.Commit()
}
