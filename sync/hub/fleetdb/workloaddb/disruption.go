package workloaddb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/schedule/disruption"
)

// KindPDB is a PodDisruptionBudget as stored.
const KindPDB = "PodDisruptionBudget"

// pdbs stores the PodDisruptionBudgets. As with the API server's status
// subresource, a budget applied again keeps the status the disruption
// controller gave it; its generation counts up when its spec changed,
// so evictions wait for the next pass to compute it again.
func (a *applyTx) pdbs() error {
	for _, pdb := range a.objs.PDBs {
		old := &policyv1.PodDisruptionBudget{}
		found, err := storedObject(a.tx, KindPDB, pdb.Namespace, pdb.Name, old)
		if err != nil {
			return err
		}
		serverFields(&pdb.ObjectMeta, &old.ObjectMeta, found, !equality.Semantic.DeepEqual(pdb.Spec, old.Spec), a.now)
		pdb.Status = policyv1.PodDisruptionBudgetStatus{}
		if found {
			pdb.Status = old.Status
		}
		if err := a.put(KindPDB, pdb.Namespace, pdb.Name, pdb); err != nil {
			return err
		}
	}
	return nil
}

// storePDBStatus writes budgets' status, each only onto the budget it
// was computed for (same UID): one deleted or applied anew meanwhile is
// left as it is.
func storePDBStatus(tx *sql.Tx, d sqldb.Dialect, pdbs []*policyv1.PodDisruptionBudget) error {
	for _, pdb := range pdbs {
		raw, err := json.Marshal(pdb.Status)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(d.Pick(`UPDATE workloads SET object = CAST(json_set(object, '$.status', json(?)) AS BLOB)
			WHERE kind = ? AND namespace = ? AND name = ? AND json_extract(object, '$.metadata.uid') = ?`,
			`UPDATE workloads SET object = convert_to(jsonb_set(json_of(object), '{status}', CAST(convert_from(?, 'UTF8') AS JSONB))::text, 'UTF8')
			WHERE kind = ? AND namespace = ? AND name = ? AND json_of(object)->'metadata'->>'uid' = ?`),
			raw, KindPDB, pdb.Namespace, pdb.Name, string(pdb.UID)); err != nil {
			return err
		}
	}
	return nil
}

// namespacePDBs reads the budgets of a namespace.
func namespacePDBs(tx *sql.Tx, namespace string) ([]*policyv1.PodDisruptionBudget, error) {
	rows, err := tx.Query(`SELECT object FROM workloads WHERE kind = ? AND namespace = ? ORDER BY name`, KindPDB, namespace)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*policyv1.PodDisruptionBudget
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		pdb := &policyv1.PodDisruptionBudget{}
		if err := json.Unmarshal(raw, pdb); err != nil {
			return nil, fmt.Errorf("stored %s: %w", KindPDB, err)
		}
		out = append(out, pdb)
	}
	return out, rows.Err()
}

// Eviction is what the eviction API knows of a pod besides the hub's
// record: what its device reports.
type Eviction struct {
	// Healthy: the device reports the pod Ready.
	Healthy bool
	// Phase is the phase the device reports ("" when it has not).
	Phase v1.PodPhase
	// GracePeriodSeconds, if set, is the deletion's grace period.
	GracePeriodSeconds *int64
}

// Evict is the eviction API for a hub pod, in one transaction: the
// budgets of its namespace are read, the eviction checked against them
// (disruption.Check), the budget charged and the pod marked for deletion
// with DisruptionTarget=True (EvictionByEvictionAPI) together, so two
// evictions can never both spend a budget's last disruption. The caller
// serialises it with the scheduling passes, which write the budgets'
// status. A refusal is a *disruption.Refusal; the pod it returns is as
// stored after the eviction.
func (f *Store) Evict(key types.NamespacedName, e Eviction, now time.Time) (*v1.Pod, error) {
	tx, err := f.db.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var raw []byte
	err = tx.QueryRow(`SELECT pod FROM hub_pods WHERE namespace = ? AND name = ?`, key.Namespace, key.Name).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pods %q not found: %w", key.Name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	p := &v1.Pod{}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, err
	}
	phase := e.Phase
	if p.Spec.NodeName == "" || phase == "" {
		phase = v1.PodPending // placed but not reported: not running yet
	}
	ignorable := phase == v1.PodPending || phase == v1.PodSucceeded || phase == v1.PodFailed || p.DeletionTimestamp != nil
	pdbs, err := namespacePDBs(tx, key.Namespace)
	if err != nil {
		return nil, err
	}
	charged, err := disruption.Check(p, e.Healthy, ignorable, pdbs)
	if err != nil {
		return nil, err
	}
	if charged != nil {
		disruption.Charge(charged, p.Name, true, now)
		if err := storePDBStatus(tx, f.db.Dialect, []*policyv1.PodDisruptionBudget{charged}); err != nil {
			return nil, err
		}
	}
	if p.Spec.NodeName == "" {
		// Never on a device: nothing to stop.
		if _, err := tx.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, key.Namespace, key.Name); err != nil {
			return nil, err
		}
		if err := forgetEvents(tx, "Pod", key.Namespace, key.Name); err != nil {
			return nil, err
		}
		return p, tx.Commit()
	}
	if p.DeletionTimestamp == nil {
		disruption.SetTarget(p, disruption.ReasonEvictionAPI, now)
		t := metav1.NewTime(now)
		p.DeletionTimestamp = &t
		p.DeletionGracePeriodSeconds = e.GracePeriodSeconds
		p.Status.Reason, p.Status.Message = "Evicted", "Evicted by the eviction API"
		raw, _ = json.Marshal(p)
		if _, err := tx.Exec(`UPDATE hub_pods SET pod = ? WHERE namespace = ? AND name = ?`, raw, key.Namespace, key.Name); err != nil {
			return nil, err
		}
	}
	return p, tx.Commit()
}

// HubPodDevice is the device a hub pod is bound to ("" while unplaced).
func (f *Store) HubPodDevice(key types.NamespacedName) (string, error) {
	var device string
	err := f.db.QueryRow(`SELECT device FROM hub_pods WHERE namespace = ? AND name = ?`, key.Namespace, key.Name).Scan(&device)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("pods %q not found: %w", key.Name, ErrNotFound)
	}
	return device, err
}
