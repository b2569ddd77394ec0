package fleetdb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// FenceState is a device's fence as the hub keeps it.
type FenceState struct {
	// Since is when the operator fenced the device; zero: not fenced.
	Since time.Time
	// Pods are the keys (namespace/name) the fence names so far.
	Pods []string
	// Generation is the first desired generation that carried the
	// fence (0: none stored yet).
	Generation int64
}

// Fenced says the device is fenced.
func (s FenceState) Fenced() bool { return !s.Since.IsZero() }

// Fence returns a device's fence; ErrNotFound for an unknown device.
func (f *Fleet) Fence(id string) (FenceState, error) {
	var since, gen int64
	var raw []byte
	err := f.db.QueryRow(`SELECT fenced_at, fence, fence_generation FROM devices WHERE id = ?`, id).Scan(&since, &raw, &gen)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return FenceState{}, fmt.Errorf("device %q: %w", id, ErrNotFound)
		}
		return FenceState{}, err
	}
	s := FenceState{Generation: gen}
	if since > 0 {
		s.Since = time.UnixMilli(since)
	}
	json.Unmarshal(raw, &s.Pods) // written by SaveDesiredAll
	return s, nil
}

// SetFenced fences a device at at (kept if it is fenced already): from
// then on its desired documents carry no pod and a fence, and the
// scheduler force-deletes its pods.
//
// The fence starts with the hub pods the device last reported: the
// documents it has not applied yet may have dropped a pod it still runs
// (one deleted, or evicted by a taint, while the device was out of
// reach), which the fence must name all the same, so that the device
// stops it before anything else and the fence is not lifted while it
// runs. NextFence adds the pods of the documents.
func (f *Fleet) SetFenced(id string, at time.Time) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	limit := strconv.Itoa(protocol.MaxFencedPods)
	return f.updateDevice(id, `UPDATE devices SET
		fence = CASE WHEN fenced_at = 0 THEN `+f.dialect.Pick(
		`(SELECT json_group_array(key) FROM (SELECT key FROM mirrors
			WHERE device = devices.id AND (scheduled = 1 OR json_extract(CAST(pod AS TEXT), '$.metadata.annotations."`+manifest.AnnotationSource+`"') = '`+manifest.SourceHub+`')
			ORDER BY key LIMIT `+limit+`))`,
		`(SELECT convert_to(COALESCE(json_agg(key ORDER BY key)::text, '[]'), 'UTF8') FROM (SELECT key FROM mirrors
			WHERE device = devices.id AND (scheduled = 1 OR json_of(pod)->'metadata'->'annotations'->>'`+manifest.AnnotationSource+`' = '`+manifest.SourceHub+`')
			ORDER BY key LIMIT `+limit+`) k)`)+` ELSE fence END,
		fenced_at = CASE WHEN fenced_at = 0 THEN ? ELSE fenced_at END
		WHERE id = ?`, at.UnixMilli())
}

// ErrFenceNotDelivered refuses to lift a fence the device has not
// applied, or whose pods it still reports.
var ErrFenceNotDelivered = errors.New("cannot lift the fence yet")

// Unfence lifts a device's fence, only once it is safe: the device has
// applied a document carrying the fence, and reports none of the fenced
// pods any more. Otherwise a device that never read its fence could run
// again, next to their replacements, the pods the hub moved elsewhere.
func (f *Fleet) Unfence(id string) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	s, err := f.Fence(id)
	if err != nil {
		return err
	}
	if !s.Fenced() {
		return nil
	}
	var observed int64
	if err := f.db.QueryRow(`SELECT COALESCE((SELECT observed FROM acks WHERE device = ?), 0)`, id).Scan(&observed); err != nil {
		return err
	}
	if s.Generation == 0 || observed < s.Generation {
		return fmt.Errorf("device %s: %w: it has not applied the fence (generation %d; it reports %d applied); it reads it when it reconnects",
			id, ErrFenceNotDelivered, s.Generation, observed)
	}
	for _, key := range s.Pods {
		var mirrored bool
		if err := f.db.QueryRow(`SELECT EXISTS (SELECT 1 FROM mirrors WHERE device = ? AND key = ?)`, id, key).Scan(&mirrored); err != nil {
			return err
		}
		if mirrored {
			return fmt.Errorf("device %s: %w: it still reports the fenced pod %s", id, ErrFenceNotDelivered, key)
		}
	}
	return f.updateDevice(id, `UPDATE devices SET fenced_at = ?, fence = '[]', fence_generation = 0 WHERE id = ?`, 0)
}

// NextFence is the fence a device's next desired document carries: nil
// when it is not fenced, else its fence widened with the pods of the
// document it replaces (keys of protocol pods).
func NextFence(s FenceState, current []json.RawMessage) *protocol.Fence {
	if !s.Fenced() {
		return nil
	}
	seen := map[string]bool{}
	out := &protocol.Fence{Since: s.Since.UTC(), Pods: []string{}}
	add := func(k string) {
		if k != "" && !seen[k] && len(out.Pods) < protocol.MaxFencedPods {
			seen[k] = true
			out.Pods = append(out.Pods, k)
		}
	}
	for _, k := range s.Pods {
		add(k)
	}
	for _, raw := range current {
		var meta struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		}
		if json.Unmarshal(raw, &meta) == nil && meta.Metadata.Name != "" {
			ns := meta.Metadata.Namespace
			if ns == "" {
				ns = "default"
			}
			add(ns + "/" + meta.Metadata.Name)
		}
	}
	return out
}
