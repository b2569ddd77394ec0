package workloaddb

import (
	"database/sql"
	"encoding/json"
	"errors"

	"fmt"
	appsv1 "k8s.io/api/apps/v1"
	"slices"
	"time"
)

// WorkloadDetail is a workload with its events (describe).
type WorkloadDetail struct {
	Object json.RawMessage `json:"object"`
	Events []SchedEvent    `json:"events"`
}

// WorkloadDetail is describe's answer for a workload: the stored object
// and its events (a Deployment's with its pods').
func (f *Store) WorkloadDetail(kind, namespace, name string) (WorkloadDetail, error) {
	if kind == KindPriorityClass {
		namespace = ""
	}
	var d WorkloadDetail
	var status []byte
	err := f.db.QueryRow(`SELECT object, status FROM workloads WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name).Scan(&d.Object, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return d, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrNotFound)
	}
	if err != nil {
		return d, err
	}
	if kind == KindDeployment || kind == KindDaemonSet || kind == KindStatefulSet {
		// With its status, and a Deployment's revision annotation.
		obj, err := decodeWorkload(kind, d.Object, status)
		if err != nil {
			return d, err
		}
		if dep, ok := obj.(*appsv1.Deployment); ok {
			var n int64
			if err := f.db.QueryRow(`SELECT COALESCE(MAX(number), 0) FROM revisions WHERE kind = ? AND namespace = ? AND name = ?`,
				kind, namespace, name).Scan(&n); err != nil {
				return d, err
			}
			WithRevision(dep, n)
		}
		d.Object, _ = json.Marshal(obj)
	}
	if kind == KindDeployment {
		// A Deployment's describe shows its pods' scheduling events too.
		d.Events, err = f.deploymentEvents(namespace, name)
	} else {
		d.Events, err = f.ObjectEvents(kind, namespace, name)
	}
	return d, err
}

// deploymentEvents are a Deployment's events and its pods', the newest
// maxEventsPerObject of them, oldest first, in one query: its pods are
// found among the pods named after it (an index range, not every pod),
// by a ReplicaSet controller named after it and their template hash.
func (f *Store) deploymentEvents(namespace, name string) ([]SchedEvent, error) {
	rows, err := f.db.Query(`SELECT kind, name, type, reason, message, count, first, last FROM (
		SELECT e.rowid AS id, e.* FROM sched_events e WHERE e.kind = ? AND e.namespace = ? AND e.name = ?
		UNION ALL
		SELECT e.rowid AS id, e.* FROM sched_events e JOIN hub_pods p ON p.namespace = e.namespace AND p.name = e.name
		WHERE e.kind = 'Pod' AND e.namespace = ? AND e.name >= ? || '-' AND e.name < ? || '.'
		AND EXISTS (`+f.db.Dialect.Pick(`SELECT 1 FROM json_each(p.pod, '$.metadata.ownerReferences') r
			WHERE json_extract(r.value, '$.kind') = 'ReplicaSet' AND json_extract(r.value, '$.name') =
				? || COALESCE('-' || NULLIF(json_extract(p.pod, '$.metadata.labels."pod-template-hash"'), ''), '')`,
		`SELECT 1 FROM jsonb_array_elements(json_of(p.pod)->'metadata'->'ownerReferences') r
			WHERE r->>'kind' = 'ReplicaSet' AND r->>'name' =
				? || COALESCE('-' || NULLIF(json_of(p.pod)->'metadata'->'labels'->>'pod-template-hash', ''), '')`)+`)
		) e ORDER BY last DESC, id DESC LIMIT ?`,
		KindDeployment, namespace, name, namespace, name, name, name, maxEventsPerObject)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SchedEvent
	for rows.Next() {
		e := SchedEvent{Namespace: namespace}
		var first, last int64
		if err := rows.Scan(&e.Kind, &e.Name, &e.Type, &e.Reason, &e.Message, &e.Count, &first, &last); err != nil {
			return nil, err
		}
		e.First, e.Last = time.UnixMilli(first), time.UnixMilli(last)
		out = append(out, e)
	}
	slices.Reverse(out)
	return out, rows.Err()
}
