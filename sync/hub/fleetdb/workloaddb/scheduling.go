package workloaddb

import (
	"k8s.io/apimachinery/pkg/types"
)

// NothingToSchedule says whether the hub holds no workload and no pod.
func (f *Store) NothingToSchedule() (bool, error) {
	var n int
	err := f.db.QueryRow(`SELECT (SELECT COUNT(*) FROM workloads) + (SELECT COUNT(*) FROM hub_pods)`).Scan(&n)
	return n == 0, err
}

// PodOnDevice is a hub pod and the device it is bound to.
type PodOnDevice struct {
	Key    types.NamespacedName
	Device string
}

// Terminating lists the pods being deleted gracefully on their device.
func (f *Store) Terminating() ([]PodOnDevice, error) {
	rows, err := f.db.Query(`SELECT namespace, name, device FROM hub_pods
		WHERE device != '' AND ` + f.db.Dialect.Pick(`json_extract(pod, '$.metadata.deletionTimestamp')`, `json_of(pod)->'metadata'->>'deletionTimestamp'`) + ` IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PodOnDevice
	for rows.Next() {
		var p PodOnDevice
		if err := rows.Scan(&p.Key.Namespace, &p.Key.Name, &p.Device); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Forget drops pods the hub no longer holds, with their events.
func (f *Store) Forget(keys []types.NamespacedName) error {
	if len(keys) == 0 {
		return nil
	}
	// One transaction, fenced as StorePods is: a deposed leader forgets
	// nothing.
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
	for _, k := range keys {
		if _, err := tx.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, k.Namespace, k.Name); err != nil {
			return err
		}
		if err := forgetEvents(tx, "Pod", k.Namespace, k.Name); err != nil {
			return err
		}
	}
	return tx.Commit()
}
