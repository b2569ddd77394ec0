package workloaddb

import "k8s.io/apimachinery/pkg/types"

// HubPodPlacement is a hub pod and the device it is bound to.
type HubPodPlacement struct {
	Key    types.NamespacedName
	Device string // "" while unbound
}

// HubPodPlacements reads where every hub pod is bound, without reading
// the pods. (A hub pod's stored phase is Pending, or none: its phase
// after that is its device's report.)
func (f *Store) HubPodPlacements() ([]HubPodPlacement, error) {
	rows, err := f.db.Query(`SELECT namespace, name, device FROM hub_pods`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []HubPodPlacement
	for rows.Next() {
		var p HubPodPlacement
		if err := rows.Scan(&p.Key.Namespace, &p.Key.Name, &p.Device); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
