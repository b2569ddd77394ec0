package workloaddb

import (
	"github.com/podvisor/podvisor/sync/hub/schedule"
	"k8s.io/apimachinery/pkg/types"
)

// NothingToSchedule says whether the hub holds no workload and no pod.
func (f *Store) NothingToSchedule() (bool, error) {
	var n int
	err := f.db.QueryRow(`SELECT (SELECT COUNT(*) FROM workloads) + (SELECT COUNT(*) FROM hub_pods)`).Scan(&n)
	return n == 0, err
}

// ForgetStopped forgets the terminating pods whose device confirmed they
// stopped — it applied a desired generation without them and reports no
// such pod — and those of devices no longer in the fleet.
func (f *Store) ForgetStopped(devices []schedule.Device) (int, error) {
	known := map[string]bool{}
	for _, d := range devices {
		known[d.Name] = true
	}
	rows, err := f.db.Query(`SELECT p.namespace, p.name, p.device,
		COALESCE((SELECT generation FROM desired WHERE device = p.device), 0),
		COALESCE((SELECT observed FROM acks WHERE device = p.device), 0),
		EXISTS (SELECT 1 FROM mirrors m WHERE m.device = p.device AND m.key = p.namespace || '/' || p.name)
		FROM hub_pods p WHERE p.device != '' AND json_extract(p.pod, '$.metadata.deletionTimestamp') IS NOT NULL`)
	if err != nil {
		return 0, err
	}
	var stopped []types.NamespacedName
	for rows.Next() {
		var ns, name, dev string
		var gen, observed int64
		var mirrored bool
		if err := rows.Scan(&ns, &name, &dev, &gen, &observed, &mirrored); err != nil {
			rows.Close()
			return 0, err
		}
		if !known[dev] || (observed >= gen && !mirrored) {
			stopped = append(stopped, types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, k := range stopped {
		if _, err := f.db.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, k.Namespace, k.Name); err != nil {
			return 0, err
		}
		if err := forgetEvents(f.db, "Pod", k.Namespace, k.Name); err != nil {
			return 0, err
		}
	}
	return len(stopped), nil
}
