package fleetdb

import (
	"database/sql"
	"errors"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A mirror's summary is what the workload controllers read of a pod its
// device reports: Ready and since when (on the hub's clock), the phase,
// restarts and a failure reason. It is computed when the status is
// stored, from the pod ApplyStatus already holds decoded, and kept in
// columns beside the JSON.

// FailureReasons are the container waiting and terminated reasons that
// say a pod cannot run as it is (kubelet's words). A pod in one of them
// has a verdict for a rollout: failed.
var FailureReasons = []string{
	"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError",
	"PreStartHookError", "PostStartHookError", "ContainerCannotRun", "StartError", "Error", "OOMKilled",
}

var failureReason = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range FailureReasons {
		m[r] = true
	}
	return m
}()

// AnnotationScheduled marks the pods the hub's scheduler placed
// (devicelink.AnnotationScheduled): only theirs change a pass.
const AnnotationScheduled = "podvisor.io/scheduled"

// summary is one pod's summary columns.
type summary struct {
	ready    bool
	phase    string
	restarts int64
	failure  string
}

func summarize(p *v1.Pod) summary {
	s := summary{phase: string(p.Status.Phase)}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			s.ready = c.Status == v1.ConditionTrue
		}
	}
	for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range list {
			s.restarts += int64(c.RestartCount)
			if s.failure != "" {
				continue
			}
			if w := c.State.Waiting; w != nil && failureReason[w.Reason] {
				s.failure = w.Reason
			} else if t := c.State.Terminated; t != nil && failureReason[t.Reason] {
				s.failure = t.Reason
			}
		}
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mirrorSummaryMigration adds the summary columns and fills them from
// the stored JSON. A mirror Ready then is taken as Ready since the
// migration: the hub never saw when it became so.
var mirrorSummaryMigration = `ALTER TABLE mirrors ADD COLUMN ready INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE mirrors ADD COLUMN ready_since INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE mirrors ADD COLUMN phase TEXT NOT NULL DEFAULT '';
	ALTER TABLE mirrors ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE mirrors ADD COLUMN failure TEXT NOT NULL DEFAULT '';
	ALTER TABLE mirrors ADD COLUMN summary_at INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE mirrors ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX mirrors_scheduled ON mirrors(device, key) WHERE scheduled = 1;
	UPDATE mirrors SET
		scheduled = COALESCE(json_extract(CAST(pod AS TEXT), '$.metadata.annotations."` + AnnotationScheduled + `"') = 'true', 0),
		phase = COALESCE(json_extract(CAST(pod AS TEXT), '$.status.phase'), ''),
		ready = EXISTS (SELECT 1 FROM json_each(CAST(pod AS TEXT), '$.status.conditions') c
			WHERE json_extract(c.value, '$.type') = 'Ready' AND json_extract(c.value, '$.status') = 'True'),
		restarts = COALESCE((SELECT SUM(COALESCE(json_extract(c.value, '$.restartCount'), 0)) FROM
			(SELECT value FROM json_each(CAST(pod AS TEXT), '$.status.initContainerStatuses')
			UNION ALL SELECT value FROM json_each(CAST(pod AS TEXT), '$.status.containerStatuses')) c), 0),
		failure = COALESCE((SELECT r FROM (
			SELECT 0 AS o, c.id AS i, COALESCE(json_extract(c.value, '$.state.waiting.reason'), json_extract(c.value, '$.state.terminated.reason')) AS r
				FROM json_each(CAST(pod AS TEXT), '$.status.initContainerStatuses') c
			UNION ALL
			SELECT 1, c.id, COALESCE(json_extract(c.value, '$.state.waiting.reason'), json_extract(c.value, '$.state.terminated.reason'))
				FROM json_each(CAST(pod AS TEXT), '$.status.containerStatuses') c)
			WHERE r IN ('` + strings.Join(FailureReasons, "', '") + `') ORDER BY o, i LIMIT 1), ''),
		summary_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000;
	UPDATE mirrors SET ready_since = summary_at WHERE ready = 1;`

// PodSummary is what a device last reported of a pod the hub's
// scheduler placed there.
type PodSummary struct {
	Device string
	Key    types.NamespacedName
	Ready  bool
	// ReadySince is when the hub received the report that first said
	// Ready after it was not (zero while not Ready).
	ReadySince time.Time
	Phase      v1.PodPhase
	Restarts   int32
	// Failure is a container's failure reason (FailureReasons), or "".
	Failure string
}

// ScheduledSummaries reads the summaries of the mirrors of pods the
// hub's scheduler placed (podvisor.io/scheduled), in one query of the
// summary columns (no JSON); the caller matches them to its pods and
// their devices.
func (f *Fleet) ScheduledSummaries() ([]PodSummary, error) {
	rows, err := f.db.Query(`SELECT device, key, ready, ready_since, phase, restarts, failure
		FROM mirrors WHERE scheduled = 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PodSummary
	for rows.Next() {
		var s PodSummary
		var key string
		var since, restarts int64
		if err := rows.Scan(&s.Device, &key, &s.Ready, &since, &s.Phase, &restarts, &s.Failure); err != nil {
			return nil, err
		}
		s.Key.Namespace, s.Key.Name, _ = strings.Cut(key, "/")
		if s.Ready && since > 0 {
			s.ReadySince = time.UnixMilli(since)
		}
		s.Restarts = int32(min(restarts, 1<<31-1))
		out = append(out, s)
	}
	return out, rows.Err()
}

// MirrorSummary is what device last reported of one pod (key:
// namespace/name): its phase and whether it is Ready; found is false
// when it reports no such pod.
func (f *Fleet) MirrorSummary(device, key string) (phase v1.PodPhase, ready, found bool, err error) {
	err = f.db.QueryRow(`SELECT phase, ready FROM mirrors WHERE device = ? AND key = ?`, device, key).Scan(&phase, &ready)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, false, nil
	}
	return phase, ready, err == nil, err
}
