package workloaddb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// ApplyObjects stores decoded objects, all or nothing: workloads and
// PriorityClasses replace those of the same name, bare pods are added
// unbound (a pod already held keeps its place: pods are immutable). What
// the API server checks against stored objects is checked here: fields
// immutable on update, one global default PriorityClass, a bare pod's
// priority against its class; and the server's own metadata is set
// whatever the file says (see serverFields).
func (f *Store) ApplyObjects(objs *kinds.Objects, now time.Time) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f.ApplyObjectsTx(tx, objs, now); err != nil {
		return err
	}
	return tx.Commit()
}

// ApplyObjectsTx is ApplyObjects in the caller's transaction, which
// stores the rest of the same apply (objectdb: ConfigMaps and Secrets).
func (f *Store) ApplyObjectsTx(tx *sql.Tx, objs *kinds.Objects, now time.Time) error {
	a := &applyTx{tx: tx, dialect: f.db.Dialect, objs: objs, now: now}
	for _, step := range []func() error{a.deployments, a.daemonSets, a.statefulSets, a.priorityClasses, a.pdbs, a.checkBounds, a.pods} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// applyTx is one ApplyObjects: its transaction, the objects and the time.
type applyTx struct {
	tx      *sql.Tx
	dialect sqldb.Dialect
	objs    *kinds.Objects
	now     time.Time
}

// put stores a workload or PriorityClass, replacing one of its name.
func (a *applyTx) put(kind, ns, name string, obj any) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = a.tx.Exec(`INSERT INTO workloads (kind, namespace, name, object) VALUES (?, ?, ?, ?)
		ON CONFLICT(kind, namespace, name) DO UPDATE SET object = excluded.object`, kind, ns, name, raw)
	return err
}

// refused is the error of an object the checks refuse, where the file has it.
func (a *applyTx) refused(kind, ns, name string, errs field.ErrorList) error {
	return fmt.Errorf("%s: %w", a.objs.Where(kind, ns, name), errs.ToAggregate())
}

var selectorPath = field.NewPath("spec", "selector")

// deployments stores the Deployments; a selector is immutable.
func (a *applyTx) deployments() error {
	for _, d := range a.objs.Deployments {
		old := &appsv1.Deployment{}
		found, err := storedObject(a.tx, KindDeployment, d.Namespace, d.Name, old)
		if err != nil {
			return err
		}
		if found {
			if errs := apivalidation.ValidateImmutableField(d.Spec.Selector, old.Spec.Selector, selectorPath); len(errs) > 0 {
				return a.refused(KindDeployment, d.Namespace, d.Name, errs)
			}
		}
		serverFields(&d.ObjectMeta, &old.ObjectMeta, found, !equality.Semantic.DeepEqual(d.Spec, old.Spec), a.now)
		d.Status = appsv1.DeploymentStatus{}
		if err := a.put(KindDeployment, d.Namespace, d.Name, d); err != nil {
			return err
		}
	}
	return nil
}

// daemonSets stores the DaemonSets; a selector is immutable.
func (a *applyTx) daemonSets() error {
	for _, d := range a.objs.DaemonSets {
		old := &appsv1.DaemonSet{}
		found, err := storedObject(a.tx, KindDaemonSet, d.Namespace, d.Name, old)
		if err != nil {
			return err
		}
		if found {
			if errs := apivalidation.ValidateImmutableField(d.Spec.Selector, old.Spec.Selector, selectorPath); len(errs) > 0 {
				return a.refused(KindDaemonSet, d.Namespace, d.Name, errs)
			}
		}
		serverFields(&d.ObjectMeta, &old.ObjectMeta, found, !equality.Semantic.DeepEqual(d.Spec, old.Spec), a.now)
		d.Status = appsv1.DaemonSetStatus{}
		if err := a.put(KindDaemonSet, d.Namespace, d.Name, d); err != nil {
			return err
		}
	}
	return nil
}

// statefulSets stores the StatefulSets; only some of a spec may change
// (kinds.ValidateStatefulSetUpdate).
func (a *applyTx) statefulSets() error {
	for _, st := range a.objs.StatefulSets {
		old := &appsv1.StatefulSet{}
		found, err := storedObject(a.tx, KindStatefulSet, st.Namespace, st.Name, old)
		if err != nil {
			return err
		}
		if found {
			if errs := kinds.ValidateStatefulSetUpdate(st, old); len(errs) > 0 {
				return a.refused(KindStatefulSet, st.Namespace, st.Name, errs)
			}
		}
		serverFields(&st.ObjectMeta, &old.ObjectMeta, found, !equality.Semantic.DeepEqual(st.Spec, old.Spec), a.now)
		st.Status = appsv1.StatefulSetStatus{}
		if err := a.put(KindStatefulSet, st.Namespace, st.Name, st); err != nil {
			return err
		}
	}
	return nil
}

// priorityClasses stores the PriorityClasses (checkPriorityClass).
func (a *applyTx) priorityClasses() error {
	for _, pc := range a.objs.PriorityClasses {
		old := &schedulingv1.PriorityClass{}
		found, err := storedObject(a.tx, KindPriorityClass, "", pc.Name, old)
		if err != nil {
			return err
		}
		errs, err := checkPriorityClass(a.tx, pc, old, found)
		if err != nil {
			return err
		}
		if len(errs) > 0 {
			return a.refused(KindPriorityClass, "", pc.Name, errs)
		}
		serverFields(&pc.ObjectMeta, &old.ObjectMeta, found, false, a.now)
		if err := a.put(KindPriorityClass, "", pc.Name, pc); err != nil {
			return err
		}
	}
	return nil
}

// checkBounds refuses an apply that would make the workloads too many.
func (a *applyTx) checkBounds() error { return checkWorkloadBounds(a.tx, a.dialect) }

// pods adds the bare pods, unbound, within the hub's bound on pods.
func (a *applyTx) pods() error {
	var held int
	if err := a.tx.QueryRow(`SELECT COUNT(*) FROM hub_pods`).Scan(&held); err != nil {
		return err
	}
	if held+len(a.objs.Pods) > MaxHubPods {
		return fmt.Errorf("the hub holds %d pods; %d more would pass the limit of %d", held, len(a.objs.Pods), MaxHubPods)
	}
	for _, p := range a.objs.Pods {
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		if err := admitPriority(a.tx, p); err != nil {
			return fmt.Errorf("%s: %w", a.objs.Where("Pod", p.Namespace, p.Name), err)
		}
		p.Spec.NodeName = "" // the scheduler places bare pods
		p.Status = v1.PodStatus{}
		serverFields(&p.ObjectMeta, nil, false, false, a.now)
		raw, _ := json.Marshal(p)
		if _, err := a.tx.Exec(`INSERT INTO hub_pods (namespace, name, pod) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
			p.Namespace, p.Name, raw); err != nil {
			return err
		}
	}
	return nil
}
