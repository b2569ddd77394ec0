package api

import (
	"errors"
	"fmt"
	"net/http"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule/disruption"
)

// disruptionRoutes are the eviction API and the list of a device's hub
// pods that `podhub drain` evicts.
func (a *API) disruptionRoutes(mux *http.ServeMux) {
	// POST a policy/v1 Eviction, as to a pod's eviction subresource.
	mux.HandleFunc("POST /v1/pods/{namespace}/{name}/eviction", func(w http.ResponseWriter, r *http.Request) {
		var ev policyv1.Eviction
		if err := decodeBody(r, &ev); err != nil {
			reply(w, nil, err)
			return
		}
		key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
		if ev.Name != key.Name || (ev.Namespace != "" && ev.Namespace != key.Namespace) {
			reply(w, nil, errors.New("name in URL does not match name in Eviction object"))
			return
		}
		var grace *int64
		if ev.DeleteOptions != nil {
			if g := ev.DeleteOptions.GracePeriodSeconds; g != nil && *g < 0 {
				reply(w, nil, fmt.Errorf("deleteOptions.gracePeriodSeconds: %d: must be greater than or equal to 0", *g))
				return
			}
			grace = ev.DeleteOptions.GracePeriodSeconds
		}
		_, err := a.Scheduler.Evict(key, grace, a.now())
		reply(w, map[string]string{"status": "Success"}, err)
	})
	// The pods the hub holds on a device (not the device's own).
	mux.HandleFunc("GET /v1/devices/{id}/hubpods", func(w http.ResponseWriter, r *http.Request) {
		pods, err := a.Workloads.HubPodsOn(r.PathValue("id"))
		out := make([]v1.Pod, 0, len(pods))
		for _, p := range pods {
			out = append(out, *p)
		}
		reply(w, out, err)
	})
}

// refusalReply answers a refused eviction as the API server does: its
// status code (429: retry later) and message, with the budget's cause.
func refusalReply(err error) (int, apiError, bool) {
	var r *disruption.Refusal
	if !errors.As(err, &r) {
		return 0, apiError{}, false
	}
	return r.Code, apiError{Error: r.Message, Cause: r.Cause, Budget: r.Budget}, true
}
