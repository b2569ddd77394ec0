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
	for _, k := range keys {
		if _, err := f.db.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, k.Namespace, k.Name); err != nil {
			return err
		}
		if err := forgetEvents(f.db, "Pod", k.Namespace, k.Name); err != nil {
			return err
		}
	}
	return nil
}
