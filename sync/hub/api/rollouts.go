package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// RolloutRequest is a rollout verb's options.
type RolloutRequest struct {
	// ToRevision is undo's revision (0: the one before the newest).
	ToRevision int64 `json:"toRevision,omitempty"`
}

// RolloutDone says what a rollout verb did, in kubectl's word
// ("paused", "rolled back", "skipped rollback (...)").
type RolloutDone struct {
	Done string `json:"done"`
}

// rolloutKinds are the kinds that roll out.
var rolloutKinds = map[string]string{"deployments": workloaddb.KindDeployment, "daemonsets": workloaddb.KindDaemonSet,
	"statefulsets": workloaddb.KindStatefulSet}

func (a *API) rolloutRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/workloads/{kind}/{namespace}/{name}/revisions", func(w http.ResponseWriter, r *http.Request) {
		kind, err := rolloutKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		revs, err := a.Workloads.History(kind, r.PathValue("namespace"), r.PathValue("name"))
		if revs == nil {
			revs = []workloaddb.Revision{}
		}
		reply(w, revs, err)
	})
	mux.HandleFunc("POST /v1/workloads/{kind}/{namespace}/{name}/rollout/{verb}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := rolloutKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		var req RolloutRequest // no body: the verb's defaults
		if r.ContentLength != 0 {
			if err := decodeBodyUpTo(r, &req, 4096); err != nil {
				reply(w, nil, err)
				return
			}
		}
		if req.ToRevision < 0 {
			reply(w, nil, errBadRevision(req.ToRevision))
			return
		}
		done, err := a.Workloads.Rollout(kind, r.PathValue("namespace"), r.PathValue("name"), r.PathValue("verb"), req.ToRevision, time.Now())
		if err == nil {
			a.Scheduler.Reschedule()
		}
		reply(w, RolloutDone{Done: done}, err)
	})
}

type errBadRevision int64

func (e errBadRevision) Error() string {
	return "revision " + strconv.FormatInt(int64(e), 10) + ": must be 0 (the previous) or a revision number"
}

func rolloutKind(name string) (string, error) {
	if k, ok := rolloutKinds[name]; ok {
		return k, nil
	}
	_, err := workloadKind(name)
	if err == nil {
		err = errNoRollout(name)
	}
	return "", err
}

type errNoRollout string

func (e errNoRollout) Error() string {
	return string(e) + " do not roll out (deployments, daemonsets, statefulsets)"
}
