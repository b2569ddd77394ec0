package fleetdb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// SetCordon marks a device unschedulable (cordon) or not.
func (f *Fleet) SetCordon(id string, cordoned bool) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	return f.updateDevice(id, `UPDATE devices SET unschedulable = ? WHERE id = ?`, cordoned)
}

// SetTaint adds or replaces (by key and effect) an operator taint, or,
// with remove, takes every taint of that key (and effect, if given) off.
// A NoExecute taint is stamped with at as its timeAdded: the taint
// manager times a tolerating pod's eviction from when it saw the taint.
func (f *Fleet) SetTaint(id string, t v1.Taint, remove bool, at time.Time) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("taint key %q: %s", t.Key, strings.Join(errs, "; "))
	}
	if strings.HasPrefix(t.Key, "node.kubernetes.io/") {
		return fmt.Errorf("taint key %q: node.kubernetes.io/ taints are set by the hub from the device's state", t.Key)
	}
	if !remove {
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return fmt.Errorf("taint %s value %q: %s", t.Key, t.Value, strings.Join(errs, "; "))
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			return fmt.Errorf("taint %s: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
		}
	}
	taints, err := f.deviceTaints(id)
	if err != nil {
		return err
	}
	keep := taints[:0:0]
	for _, old := range taints {
		if old.Key == t.Key && (t.Effect == "" || old.Effect == t.Effect) {
			continue
		}
		keep = append(keep, old)
	}
	if remove && len(keep) == len(taints) {
		return fmt.Errorf("device %s has no taint %s: %w", id, t.Key, ErrNotFound)
	}
	if !remove {
		if len(keep) >= 64 {
			return fmt.Errorf("device %s: at most 64 taints", id)
		}
		taint := v1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
		if t.Effect == v1.TaintEffectNoExecute {
			added := metav1.NewTime(at.UTC())
			taint.TimeAdded = &added
		}
		keep = append(keep, taint)
	}
	raw, _ := json.Marshal(keep)
	return f.updateDevice(id, `UPDATE devices SET taints = ? WHERE id = ?`, raw)
}

func (f *Fleet) deviceTaints(id string) ([]v1.Taint, error) {
	var raw []byte
	err := f.db.QueryRow(`SELECT taints FROM devices WHERE id = ?`, id).Scan(&raw)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("device %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var out []v1.Taint
	return out, json.Unmarshal(raw, &out)
}

func (f *Fleet) updateDevice(id, query string, value any) error {
	if err := protocol.ValidDeviceID(id); err != nil {
		return err
	}
	res, err := f.exec(fleetwatch.Note{Device: id, What: fleetwatch.Node}, query, value, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("device %q: %w", id, ErrNotFound)
	}
	return nil
}

// Scheduling is what the operator set on a device for the scheduler: its
// cordon and its taints.
type Scheduling struct {
	Unschedulable bool
	Taints        []v1.Taint
	// Fenced: the operator declared the device dead (podhub fence).
	Fenced bool
}

// DeviceScheduling is every device's Scheduling, by ID.
func (f *Fleet) DeviceScheduling() (map[string]Scheduling, error) {
	rows, err := f.db.Query(`SELECT id, unschedulable, taints, fenced_at > 0 FROM devices`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]Scheduling{}
	for rows.Next() {
		var id string
		var e Scheduling
		var raw []byte
		if err := rows.Scan(&id, &e.Unschedulable, &raw, &e.Fenced); err != nil {
			return nil, err
		}
		json.Unmarshal(raw, &e.Taints) // written by SetTaint
		out[id] = e
	}
	return out, rows.Err()
}
