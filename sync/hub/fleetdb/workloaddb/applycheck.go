package workloaddb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/sync/hub/schedule"
)

// storedObject reads a stored workload or PriorityClass into v, and says
// whether there was one.
func storedObject(tx *sql.Tx, kind, namespace, name string, v any) (bool, error) {
	var raw []byte
	err := tx.QueryRow(`SELECT object FROM workloads WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("stored %s %s/%s: %w", kind, namespace, name, err)
	}
	return true, nil
}

// serverFields sets the metadata the API server owns, whatever the file
// says (a file may be `kubectl get -o yaml` output): a new object gets a
// fresh UID, the creation time and generation 1; a replaced one keeps
// its UID (its pods' owner references name it) and creation time, and
// counts its generation up when its spec changed. A deletion timestamp,
// resourceVersion or managedFields in the file mean nothing here: an
// object applied terminating would never be scheduled nor forgotten.
func serverFields(meta, old *metav1.ObjectMeta, found, specChanged bool, now time.Time) {
	meta.DeletionTimestamp, meta.DeletionGracePeriodSeconds = nil, nil
	meta.ResourceVersion, meta.ManagedFields = "", nil
	if !found {
		meta.UID = uuid.NewUUID()
		meta.CreationTimestamp = metav1.NewTime(now.UTC().Truncate(time.Second))
		meta.Generation = 1
		return
	}
	meta.UID, meta.CreationTimestamp, meta.Generation = old.UID, old.CreationTimestamp, old.Generation
	if specChanged || meta.Generation == 0 {
		meta.Generation++
	}
}

// checkPriorityClass is ValidatePriorityClassUpdate (value and
// preemptionPolicy are immutable) and the Priority admission plugin's
// check that only one class is the global default.
func checkPriorityClass(tx *sql.Tx, pc, old *schedulingv1.PriorityClass, found bool) (field.ErrorList, error) {
	var errs field.ErrorList
	if found {
		if pc.Value != old.Value {
			errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
		}
		errs = append(errs, apivalidation.ValidateImmutableField(pc.PreemptionPolicy, old.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
	}
	if !pc.GlobalDefault {
		return errs, nil
	}
	def, err := defaultClass(tx)
	if err != nil {
		return nil, err
	}
	if def != nil && def.Name != pc.Name {
		errs = append(errs, field.Forbidden(field.NewPath("globalDefault"),
			fmt.Sprintf("PriorityClass %s is already marked as default. Only one default can exist", def.Name)))
	}
	return errs, nil
}

// defaultClass is the stored global default class (the lowest valued if
// several claim it, as the admission plugin picks, then by name), or
// nil. The classes are few: they are read and compared here, one query
// for both SQL engines rather than one per engine's JSON functions.
func defaultClass(tx *sql.Tx) (*schedulingv1.PriorityClass, error) {
	rows, err := tx.Query(`SELECT object FROM workloads WHERE kind = ?`, KindPriorityClass)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var def *schedulingv1.PriorityClass
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		pc := &schedulingv1.PriorityClass{}
		if err := json.Unmarshal(raw, pc); err != nil {
			return nil, err
		}
		if pc.GlobalDefault && (def == nil || pc.Value < def.Value || pc.Value == def.Value && pc.Name < def.Name) {
			def = pc
		}
	}
	return def, rows.Err()
}

// admitPriority is the Priority admission plugin for a bare pod: its
// priority and preemption policy come from its class (or the global
// default, whose name it then carries) and stay what they were at apply,
// as in Kubernetes; a pod whose spec.priority or preemptionPolicy differ
// is refused — the scheduler takes a stored pod's spec.priority as
// admitted, so a file could otherwise give a pod any priority and
// preempt the fleet. A pod naming a class the hub does not know yet
// waits for it (the scheduler says why), unless it claims a priority,
// which nothing could then confirm.
func admitPriority(tx *sql.Tx, p *v1.Pod) error {
	var class *schedulingv1.PriorityClass
	switch name := p.Spec.PriorityClassName; name {
	case "":
		var err error
		if class, err = defaultClass(tx); err != nil {
			return err
		}
	case priority.SystemNodeCriticalName:
		class = &schedulingv1.PriorityClass{Value: priority.SystemNodeCritical}
	case priority.SystemClusterCriticalName:
		class = &schedulingv1.PriorityClass{Value: priority.SystemClusterCritical}
	default:
		class = &schedulingv1.PriorityClass{}
		found, err := storedObject(tx, KindPriorityClass, "", name, class)
		if err != nil {
			return err
		}
		if !found {
			if p.Spec.Priority == nil {
				return nil
			}
			return fmt.Errorf("pods %q is forbidden: no PriorityClass with name %s was found", p.Name, name)
		}
	}
	value, policy := schedule.ClassPriority(class)
	if p.Spec.Priority != nil && *p.Spec.Priority != value {
		return fmt.Errorf("pods %q is forbidden: the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name",
			p.Name, *p.Spec.Priority, value)
	}
	if pp := p.Spec.PreemptionPolicy; pp != nil && *pp != policy {
		return fmt.Errorf("pods %q is forbidden: the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name",
			p.Name, *pp, policy)
	}
	if class != nil && p.Spec.PriorityClassName == "" {
		p.Spec.PriorityClassName = class.Name
	}
	p.Spec.Priority, p.Spec.PreemptionPolicy = &value, &policy
	return nil
}
