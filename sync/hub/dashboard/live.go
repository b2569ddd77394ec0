package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
)

// Change is one live update (the data of an SSE event "change"): what
// the page should fetch again. A page that loses its stream fetches
// everything when it is back.
type Change struct {
	// Devices changed: their node, pods or events.
	Devices []string `json:"devices,omitempty"`
	// Pods: some device's pods changed (the pods page's rows).
	Pods bool `json:"pods,omitempty"`
	// Workloads: the hub's workloads or their statuses changed.
	Workloads bool `json:"workloads,omitempty"`
	// All: more changed than is worth naming; fetch everything.
	All bool `json:"all,omitempty"`
}

// maxNamedDevices bounds the devices one Change names; more make it All.
const maxNamedDevices = 64

// minInterval paces a stream: changes arriving within it of the last
// update go out together in the next, so a busy fleet costs a page at
// most a few fetches a second.
const minInterval = 250 * time.Millisecond

// changeOf sums up a subscription's changes for the page.
func changeOf(cs []fleetwatch.Change) Change {
	var out Change
	for _, c := range cs {
		if c.What&fleetwatch.Everything != 0 {
			out.Workloads, out.Pods, out.All = true, true, true
		}
		if c.What&fleetwatch.Workloads != 0 {
			out.Workloads = true
		}
		if c.What&fleetwatch.Pods != 0 {
			out.Pods = true
		}
		if c.Device != "" && c.What&(fleetwatch.Node|fleetwatch.Pods|fleetwatch.Events) != 0 {
			out.Devices = append(out.Devices, c.Device)
		}
	}
	if out.All || len(out.Devices) > maxNamedDevices {
		out.Devices, out.All = nil, true
	}
	sort.Strings(out.Devices)
	return out
}

// live streams changes as server-sent events until the client goes.
func (d *dashboard) live(w http.ResponseWriter, r *http.Request) {
	select {
	case d.streams <- struct{}{}:
		defer func() { <-d.streams }()
	default:
		replyError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many live dashboard streams (%d open)", cap(d.streams)))
		return
	}
	rc := http.NewResponseController(w)
	// A stream lives past the server's write timeout, if it has one.
	rc.SetWriteDeadline(time.Time{})
	sub := d.cfg.Fleet.Changes().Subscribe()
	defer sub.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The browser's EventSource reconnects after retry ms when the stream
	// breaks (and the page then fetches everything).
	fmt.Fprint(w, "retry: 2000\n: podhub dashboard\n\n")
	if rc.Flush() != nil {
		return
	}
	heartbeat := time.NewTicker(d.cfg.Heartbeat)
	defer heartbeat.Stop()
	ctx := r.Context()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-sub.Ready():
			cs := sub.Take()
			if len(cs) == 0 {
				continue
			}
			data, _ := json.Marshal(changeOf(cs))
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", data)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(minInterval):
			}
			continue
		}
		if rc.Flush() != nil {
			return
		}
	}
}
