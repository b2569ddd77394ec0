package workloaddb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sqldb"
)

// Workload kinds as stored (and named in the API's paths).
const (
	KindDeployment    = "Deployment"
	KindDaemonSet     = "DaemonSet"
	KindStatefulSet   = "StatefulSet"
	KindPriorityClass = "PriorityClass"
)

// MaxHubPods bounds the pods the hub holds (bare and made by workloads),
// so that an apply cannot grow the database without bound.
const MaxHubPods = 200000

// Workloads are every stored workload and PriorityClass.
type Workloads struct {
	Deployments     []*appsv1.Deployment
	DaemonSets      []*appsv1.DaemonSet
	StatefulSets    []*appsv1.StatefulSet
	PriorityClasses []*schedulingv1.PriorityClass
	PDBs            []*policyv1.PodDisruptionBudget
}

// Bounds on what the hub is asked to keep: every replica and every
// DaemonSet pod (one per device) is a pod the hub stores and schedules.
const (
	maxWorkloads  = 10000
	maxDaemonSets = 256
)

// checkWorkloadBounds refuses an apply that would make the stored
// workloads too many, or ask for more replicas than the hub keeps pods.
func checkWorkloadBounds(tx *sql.Tx, d sqldb.Dialect) error {
	var all, daemonSets, replicas int64
	if err := tx.QueryRow(`SELECT COUNT(*), COALESCE(SUM(CASE WHEN kind = 'DaemonSet' THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN kind IN ('Deployment', 'StatefulSet') THEN `+
		d.Pick(`json_extract(object, '$.spec.replicas')`, `(json_of(object)->'spec'->>'replicas')::bigint`)+` ELSE 0 END), 0)
		FROM workloads`).Scan(&all, &daemonSets, &replicas); err != nil {
		return err
	}
	switch {
	case all > maxWorkloads:
		return fmt.Errorf("the hub would hold %d workloads and PriorityClasses, more than the %d it keeps", all, maxWorkloads)
	case daemonSets > maxDaemonSets:
		return fmt.Errorf("the hub would hold %d DaemonSets, more than the %d it keeps", daemonSets, maxDaemonSets)
	case replicas > MaxHubPods:
		return fmt.Errorf("the Deployments and StatefulSets would ask for %d replicas in all, more than the %d pods the hub keeps", replicas, MaxHubPods)
	}
	return nil
}

// DeleteHubPod deletes a pod the scheduler placed: gracefully on its
// device (deletionTimestamp until the device confirms), at once if it
// was never placed. A workload's pod is made again unless the workload
// goes too.
func (f *Store) DeleteHubPod(namespace, name string, now time.Time) error {
	var raw []byte
	err := f.db.QueryRow(`SELECT pod FROM hub_pods WHERE namespace = ? AND name = ?`, namespace, name).Scan(&raw)
	if err == sql.ErrNoRows {
		return fmt.Errorf("pod %s/%s is not one the hub schedules: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return err
	}
	p := &v1.Pod{}
	if err := json.Unmarshal(raw, p); err != nil {
		return err
	}
	if p.Spec.NodeName == "" {
		if _, err = f.db.Exec(`DELETE FROM hub_pods WHERE namespace = ? AND name = ?`, namespace, name); err != nil {
			return err
		}
		return forgetEvents(f.db, "Pod", namespace, name)
	}
	if p.DeletionTimestamp == nil {
		t := metav1.NewTime(now)
		p.DeletionTimestamp = &t
		p.Status.Reason, p.Status.Message = "Deleted", "deleted by the operator"
	}
	raw, _ = json.Marshal(p)
	_, err = f.db.Exec(`UPDATE hub_pods SET pod = ? WHERE namespace = ? AND name = ?`, raw, namespace, name)
	return err
}

// ScheduledKeys lists which of the keys (namespace/name) are pods the
// scheduler holds.
func (f *Store) ScheduledKeys(keys []string) ([]string, error) {
	var out []string
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		var n int
		if err := f.db.QueryRow(`SELECT COUNT(*) FROM hub_pods WHERE namespace = ? AND name = ?`, ns, name).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			out = append(out, k)
		}
	}
	return out, nil
}

// DeleteWorkload removes a Deployment, DaemonSet or PriorityClass; the
// scheduler then deletes a workload's pods gracefully.
func (f *Store) DeleteWorkload(kind, namespace, name string) error {
	if kind == KindPriorityClass {
		namespace = ""
	}
	res, err := f.db.Exec(`DELETE FROM workloads WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrNotFound)
	}
	// Its revisions go with it, as its ReplicaSets or ControllerRevisions do.
	if _, err := f.db.Exec(`DELETE FROM revisions WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name); err != nil {
		return err
	}
	return forgetEvents(f.db, kind, namespace, name)
}

// ForgetEvents drops the events of an object the hub no longer holds
// (a deleted ConfigMap or Secret).
func (f *Store) ForgetEvents(kind, namespace, name string) error {
	return forgetEvents(f.db, kind, namespace, name)
}

// forgetEvents drops the events of an object the hub no longer holds:
// pod names are new with every replica made, so events kept past their
// pod would grow the database without bound (Kubernetes lets them expire
// after an hour).
func forgetEvents(db interface {
	Exec(string, ...any) (sql.Result, error)
}, kind, namespace, name string) error {
	_, err := db.Exec(`DELETE FROM sched_events WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name)
	return err
}

// LoadWorkloads reads every stored workload and PriorityClass.
func (f *Store) LoadWorkloads() (Workloads, error) {
	var w Workloads
	rows, err := f.db.Query(`SELECT kind, object, status FROM workloads ORDER BY kind, namespace, name`)
	if err != nil {
		return w, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var raw, status []byte
		if err := rows.Scan(&kind, &raw, &status); err != nil {
			return w, err
		}
		var obj any
		switch kind {
		case KindDeployment, KindDaemonSet, KindStatefulSet:
			// With the status its controller last stored.
			if obj, err = decodeWorkload(kind, raw, status); err == nil {
				switch o := obj.(type) {
				case *appsv1.Deployment:
					w.Deployments = append(w.Deployments, o)
				case *appsv1.DaemonSet:
					w.DaemonSets = append(w.DaemonSets, o)
				case *appsv1.StatefulSet:
					w.StatefulSets = append(w.StatefulSets, o)
				}
			}
		case KindPriorityClass:
			pc := &schedulingv1.PriorityClass{}
			err = json.Unmarshal(raw, pc)
			w.PriorityClasses = append(w.PriorityClasses, pc)
		case KindPDB:
			pdb := &policyv1.PodDisruptionBudget{}
			err = json.Unmarshal(raw, pdb)
			w.PDBs = append(w.PDBs, pdb)
		}
		if err != nil {
			return w, fmt.Errorf("stored %s: %w", kind, err)
		}
	}
	return w, rows.Err()
}

// HubPods reads every pod the hub holds, bound or not.
func (f *Store) HubPods() ([]*v1.Pod, error) {
	return f.hubPods(`SELECT pod FROM hub_pods ORDER BY namespace, name`)
}

// HubPodsOn are the pods the hub holds bound to one device, decoding no
// other.
func (f *Store) HubPodsOn(device string) ([]*v1.Pod, error) {
	return f.hubPods(`SELECT pod FROM hub_pods WHERE device = ? ORDER BY namespace, name`, device)
}

func (f *Store) hubPods(query string, args ...any) ([]*v1.Pod, error) {
	rows, err := f.db.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*v1.Pod
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		p := &v1.Pod{}
		if err := json.Unmarshal(raw, p); err != nil {
			return nil, fmt.Errorf("stored hub pod: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// SchedEvent is an event the scheduler or a workload controller recorded
// about an object, counted when repeated as Kubernetes counts them.
type SchedEvent struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
	Count     int       `json:"count"`
	First     time.Time `json:"firstTimestamp"`
	Last      time.Time `json:"lastTimestamp"`
}

// ObjectEvents lists an object's events, oldest first.
func (f *Store) ObjectEvents(kind, namespace, name string) ([]SchedEvent, error) {
	rows, err := f.db.Query(`SELECT type, reason, message, count, first, last FROM sched_events
		WHERE kind = ? AND namespace = ? AND name = ? ORDER BY last, rowid`, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SchedEvent
	for rows.Next() {
		e := SchedEvent{Kind: kind, Namespace: namespace, Name: name}
		var first, last int64
		if err := rows.Scan(&e.Type, &e.Reason, &e.Message, &e.Count, &first, &last); err != nil {
			return nil, err
		}
		e.First, e.Last = time.UnixMilli(first), time.UnixMilli(last)
		out = append(out, e)
	}
	return out, rows.Err()
}

// maxEventsPerObject bounds each object's stored events.
const maxEventsPerObject = 100

// eventWriter records events in a transaction with its statements
// prepared once (a first pass over a large fleet records one per pod).
type eventWriter struct {
	again, insert, prune *sql.Stmt
}

func newEventWriter(tx *sql.Tx) (*eventWriter, error) {
	w := &eventWriter{}
	var err error
	if w.again, err = tx.Prepare(`UPDATE sched_events SET count = count + 1, last = ? WHERE rowid = (
		SELECT rowid FROM sched_events WHERE kind = ? AND namespace = ? AND name = ? ORDER BY last DESC, rowid DESC LIMIT 1)
		AND type = ? AND reason = ? AND message = ?`); err != nil {
		return nil, err
	}
	if w.insert, err = tx.Prepare(`INSERT INTO sched_events (kind, namespace, name, type, reason, message, count, first, last)
		VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)`); err != nil {
		return nil, err
	}
	w.prune, err = tx.Prepare(`DELETE FROM sched_events WHERE kind = ? AND namespace = ? AND name = ? AND rowid NOT IN (
		SELECT rowid FROM sched_events WHERE kind = ? AND namespace = ? AND name = ? ORDER BY last DESC, rowid DESC LIMIT ?)`)
	return w, err
}

func (w *eventWriter) close() {
	for _, s := range []*sql.Stmt{w.again, w.insert, w.prune} {
		if s != nil {
			s.Close()
		}
	}
}

// add records an event, or counts it again when the object's newest
// event says the same (FailedScheduling every pass is one line).
func (w *eventWriter) add(e SchedEvent, at time.Time) error {
	res, err := w.again.Exec(at.UnixMilli(), e.Kind, e.Namespace, e.Name, e.Type, e.Reason, e.Message)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	if _, err := w.insert.Exec(e.Kind, e.Namespace, e.Name, e.Type, e.Reason, e.Message, at.UnixMilli(), at.UnixMilli()); err != nil {
		return err
	}
	_, err = w.prune.Exec(e.Kind, e.Namespace, e.Name, e.Kind, e.Namespace, e.Name, maxEventsPerObject)
	return err
}
