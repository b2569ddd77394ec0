package workloaddb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RolloutTables are migration 6 of fleet.db (fleetdb runs it): each
// workload's status as its controller last computed it, and its
// revisions (a Deployment's ReplicaSets, a DaemonSet's
// ControllerRevisions) with their templates, for history and undo.
const RolloutTables = `ALTER TABLE workloads ADD COLUMN status BLOB;
	CREATE TABLE revisions (
		kind         TEXT NOT NULL,
		namespace    TEXT NOT NULL,
		name         TEXT NOT NULL,
		hash         TEXT NOT NULL,
		number       INTEGER NOT NULL,
		template     BLOB,
		change_cause TEXT NOT NULL DEFAULT '',
		halted       TEXT NOT NULL DEFAULT '',
		PRIMARY KEY (kind, namespace, name, hash)
	);
`

// annotationRevision is a Deployment's revision annotation, shown on the
// objects the API returns.
const annotationRevision = "deployment.kubernetes.io/revision"

// Revision is one stored revision of a workload.
type Revision struct {
	Number int64  `json:"revision"`
	Hash   string `json:"hash"`
	// Template is the revision's pod template (JSON); null when it is
	// unknown (numbered from pods made before revisions were kept), or
	// when not read.
	Template    json.RawMessage `json:"template,omitempty"`
	NoTemplate  bool            `json:"-"`
	ChangeCause string          `json:"changeCause,omitempty"`
	Halted      string          `json:"halted,omitempty"`
}

// RevisionSet is a workload's whole set of revisions after a pass; a
// revision with a nil Template keeps the stored one.
type RevisionSet struct {
	Kind, Namespace, Name string
	Revisions             []Revision
}

// StatusWrite is a workload's status to store (JSON).
type StatusWrite struct {
	Kind, Namespace, Name string
	Raw                   json.RawMessage
}

// WorkloadKey names a workload.
type WorkloadKey struct{ Kind, Namespace, Name string }

// Revisions reads every workload's revisions, without their templates
// but that of a StatefulSet's current revision (as its stored status
// names it): its pods of that revision are made again from it.
func (f *Store) Revisions() (map[WorkloadKey][]Revision, error) {
	rows, err := f.db.Query(`SELECT r.kind, r.namespace, r.name, r.hash, r.number, r.template IS NULL, r.change_cause, r.halted,
		CASE WHEN r.kind = 'StatefulSet' AND r.name || '-' || r.hash = ` +
		f.db.Dialect.Pick(`json_extract(w.status, '$.currentRevision')`, `json_of(w.status)->>'currentRevision'`) + ` THEN r.template END
		FROM revisions r LEFT JOIN workloads w ON w.kind = r.kind AND w.namespace = r.namespace AND w.name = r.name
		ORDER BY r.kind, r.namespace, r.name, r.number`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[WorkloadKey][]Revision{}
	for rows.Next() {
		var k WorkloadKey
		var r Revision
		var t []byte
		if err := rows.Scan(&k.Kind, &k.Namespace, &k.Name, &r.Hash, &r.Number, &r.NoTemplate, &r.ChangeCause, &r.Halted, &t); err != nil {
			return nil, err
		}
		if t != nil {
			r.Template = t
		}
		out[k] = append(out[k], r)
	}
	return out, rows.Err()
}

// History reads a workload's revisions with their templates, oldest first.
func (f *Store) History(kind, namespace, name string) ([]Revision, error) {
	if _, err := f.loadWorkload(f.db, kind, namespace, name); err != nil {
		return nil, err
	}
	rows, err := f.db.Query(`SELECT hash, number, template, change_cause, halted FROM revisions
		WHERE kind = ? AND namespace = ? AND name = ? ORDER BY number`, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Revision
	for rows.Next() {
		var r Revision
		var t []byte
		if err := rows.Scan(&r.Hash, &r.Number, &t, &r.ChangeCause, &r.Halted); err != nil {
			return nil, err
		}
		r.Template, r.NoTemplate = t, t == nil
		out = append(out, r)
	}
	return out, rows.Err()
}

// storeRollouts writes a pass's statuses and revision sets in its
// transaction.
func storeRollouts(tx *sql.Tx, statuses []StatusWrite, sets []RevisionSet) error {
	for _, s := range statuses {
		if _, err := tx.Exec(`UPDATE workloads SET status = ? WHERE kind = ? AND namespace = ? AND name = ?`,
			[]byte(s.Raw), s.Kind, s.Namespace, s.Name); err != nil {
			return err
		}
	}
	for _, set := range sets {
		var exists bool
		if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM workloads WHERE kind = ? AND namespace = ? AND name = ?)`,
			set.Kind, set.Namespace, set.Name).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			continue // deleted since the pass read it
		}
		keep := map[string]bool{}
		for _, r := range set.Revisions {
			keep[r.Hash] = true
			var t any
			if r.Template != nil {
				t = []byte(r.Template)
			}
			if _, err := tx.Exec(`INSERT INTO revisions (kind, namespace, name, hash, number, template, change_cause, halted)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, namespace, name, hash) DO UPDATE SET number = excluded.number,
				template = COALESCE(excluded.template, revisions.template), change_cause = excluded.change_cause, halted = excluded.halted`,
				set.Kind, set.Namespace, set.Name, r.Hash, r.Number, t, r.ChangeCause, r.Halted); err != nil {
				return err
			}
		}
		rows, err := tx.Query(`SELECT hash FROM revisions WHERE kind = ? AND namespace = ? AND name = ?`, set.Kind, set.Namespace, set.Name)
		if err != nil {
			return err
		}
		var drop []string
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return err
			}
			if !keep[h] {
				drop = append(drop, h)
			}
		}
		rows.Close()
		for _, h := range drop {
			if _, err := tx.Exec(`DELETE FROM revisions WHERE kind = ? AND namespace = ? AND name = ? AND hash = ?`,
				set.Kind, set.Namespace, set.Name, h); err != nil {
				return err
			}
		}
	}
	return nil
}

type querier interface {
	QueryRow(string, ...any) *sql.Row
}

// loadWorkload reads a Deployment, DaemonSet or StatefulSet with its
// stored status.
func (f *Store) loadWorkload(db querier, kind, namespace, name string) (any, error) {
	var raw, status []byte
	err := db.QueryRow(`SELECT object, status FROM workloads WHERE kind = ? AND namespace = ? AND name = ?`, kind, namespace, name).Scan(&raw, &status)
	if errors.Is(err, sql.ErrNoRows) || err == nil && kind != KindDeployment && kind != KindDaemonSet && kind != KindStatefulSet {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeWorkload(kind, raw, status)
}

// decodeWorkload decodes a stored Deployment, DaemonSet or StatefulSet
// and its status.
func decodeWorkload(kind string, raw, status []byte) (any, error) {
	var obj any
	var st any
	switch kind {
	case KindDeployment:
		d := &appsv1.Deployment{}
		obj, st = d, &d.Status
	case KindDaemonSet:
		d := &appsv1.DaemonSet{}
		obj, st = d, &d.Status
	case KindStatefulSet:
		s := &appsv1.StatefulSet{}
		obj, st = s, &s.Status
	default:
		return nil, fmt.Errorf("no rollouts for kind %s", kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("stored %s: %w", kind, err)
	}
	if len(status) > 0 {
		if err := json.Unmarshal(status, st); err != nil {
			return nil, fmt.Errorf("stored %s status: %w", kind, err)
		}
	}
	return obj, nil
}

// WithRevision sets a Deployment's revision annotation, as the
// Deployment controller keeps it.
func WithRevision(d *appsv1.Deployment, n int64) {
	if n == 0 {
		return
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[annotationRevision] = strconv.FormatInt(n, 10)
}

// CurrentRevisions are the workloads' newest revision numbers.
func (f *Store) CurrentRevisions() (map[WorkloadKey]int64, error) {
	rows, err := f.db.Query(`SELECT kind, namespace, name, MAX(number) FROM revisions GROUP BY kind, namespace, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[WorkloadKey]int64{}
	for rows.Next() {
		var k WorkloadKey
		var n int64
		if err := rows.Scan(&k.Kind, &k.Namespace, &k.Name, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// Errors of the rollout verbs, in kubectl's words.
var (
	ErrAlreadyPaused = errors.New("is already paused")
	ErrNotPaused     = errors.New("is not paused")
)

// Rollout is a rollout verb applied to a stored workload: pause, resume,
// restart or undo (to a revision, 0 for the one before the newest).
// It returns kubectl's word for what it did ("paused", "rolled back",
// "skipped rollback (...)").
func (f *Store) Rollout(kind, namespace, name, verb string, toRevision int64, now time.Time) (string, error) {
	tx, err := f.db.Begin()
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	obj, err := f.loadWorkload(tx, kind, namespace, name)
	if err != nil {
		return "", err
	}
	var meta *metav1.ObjectMeta
	var tmpl *v1.PodTemplateSpec
	var paused *bool
	plural := "deployments.apps"
	switch o := obj.(type) {
	case *appsv1.Deployment:
		meta, tmpl, paused = &o.ObjectMeta, &o.Spec.Template, &o.Spec.Paused
	case *appsv1.DaemonSet:
		meta, tmpl, plural = &o.ObjectMeta, &o.Spec.Template, "daemonsets.apps"
	case *appsv1.StatefulSet:
		meta, tmpl, plural = &o.ObjectMeta, &o.Spec.Template, "statefulsets.apps"
	}
	var done string
	switch verb {
	case "pause", "resume":
		if paused == nil {
			// kubectl's objectpauser and objectresumer
			return "", fmt.Errorf("%s %q %sing is not supported", plural, name, strings.TrimSuffix(verb, "e"))
		}
		switch {
		case verb == "pause" && *paused:
			return "", fmt.Errorf("%s %q %w", plural, name, ErrAlreadyPaused)
		case verb == "resume" && !*paused:
			return "", fmt.Errorf("%s %q %w", plural, name, ErrNotPaused)
		}
		*paused, done = verb == "pause", verb+"d"
	case "restart":
		if paused != nil && *paused {
			return "", fmt.Errorf("can't restart paused deployment (run rollout resume first)")
		}
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations["kubectl.kubernetes.io/restartedAt"] = now.Format(time.RFC3339)
		done = "restarted"
	case "undo":
		if paused != nil && *paused {
			return "", fmt.Errorf("you cannot rollback a paused deployment; resume it first with 'podhub rollout resume' and try again")
		}
		t, skip, err := undoTemplate(tx, kind, namespace, name, toRevision, tmpl)
		if err != nil || skip != "" {
			return skip, err
		}
		*tmpl, done = *t, "rolled back"
	default:
		return "", fmt.Errorf("unknown rollout verb %q", verb)
	}
	meta.Generation++
	raw, _ := json.Marshal(obj)
	// The stored object carries no status (its column does).
	if _, err := tx.Exec(`UPDATE workloads SET object = ? WHERE kind = ? AND namespace = ? AND name = ?`,
		stripStatus(raw), kind, namespace, name); err != nil {
		return "", err
	}
	return done, tx.Commit()
}

// stripStatus is a workload's JSON without its status, as stored.
func stripStatus(raw []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	delete(m, "status")
	out, _ := json.Marshal(m)
	return out
}

// undoTemplate is the template of the revision to roll back to; skip
// says why nothing is done when it is the current template already.
func undoTemplate(tx *sql.Tx, kind, namespace, name string, to int64, cur *v1.PodTemplateSpec) (*v1.PodTemplateSpec, string, error) {
	q := `SELECT number, template FROM revisions WHERE kind = ? AND namespace = ? AND name = ? AND number = ?`
	args := []any{kind, namespace, name, to}
	if to == 0 {
		// The revision before the newest.
		q = `SELECT number, template FROM revisions WHERE kind = ? AND namespace = ? AND name = ? ORDER BY number DESC LIMIT 1 OFFSET 1`
		args = args[:3]
	}
	var n int64
	var raw []byte
	err := tx.QueryRow(q, args...).Scan(&n, &raw)
	switch {
	case errors.Is(err, sql.ErrNoRows) && to == 0 && kind != KindDeployment:
		return nil, "", errors.New("no last revision to roll back to") // kubectl's DaemonSet and StatefulSet rollbackers
	case errors.Is(err, sql.ErrNoRows) && to == 0:
		return nil, "", fmt.Errorf("no rollout history found for deployment %q", name)
	case errors.Is(err, sql.ErrNoRows):
		return nil, "", fmt.Errorf("unable to find specified revision %d in history", to)
	case err != nil:
		return nil, "", err
	case raw == nil:
		return nil, "", fmt.Errorf("revision %d was made before the hub kept templates: it cannot be rolled back to", n)
	}
	t := &v1.PodTemplateSpec{}
	if err := json.Unmarshal(raw, t); err != nil {
		return nil, "", fmt.Errorf("stored revision %d: %w", n, err)
	}
	a, _ := json.Marshal(t)
	b, _ := json.Marshal(cur)
	if string(a) == string(b) {
		return nil, fmt.Sprintf("skipped rollback (current template already matches revision %d)", n), nil
	}
	return t, "", nil
}
