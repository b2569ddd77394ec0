package fleetdb

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// AnnotationDevice names the device of a mirror pod at the hub.
const AnnotationDevice = "podvisor.io/device"

// Device is a device as the hub knows it.
type Device struct {
	ID string `json:"id"`
	// Labels are the operator's, and the device's own under
	// protocol.DeviceLabelPrefix (the operator's win).
	Labels map[string]string `json:"labels"`
	Online bool              `json:"online"`
	// Ready is online, heard from within the timeout, and not sharing
	// its ID with another device.
	Ready bool `json:"ready"`
	// DuplicateID says two installations report under this ID.
	DuplicateID bool      `json:"duplicateID,omitempty"`
	Instances   []string  `json:"instances,omitempty"`
	LastSeen    time.Time `json:"lastSeen"`
	// Created is when the hub first knew the device (zero for a device
	// from before the hub kept it): the age of its node.
	Created time.Time `json:"created,omitzero"`
	Version string    `json:"version"`
	Pods    int       `json:"pods"`
	// Generation is the desired document's; ObservedGeneration the one
	// the device last reported applied.
	Generation         int64          `json:"generation"`
	ObservedGeneration int64          `json:"observedGeneration"`
	Node               *v1.NodeStatus `json:"node,omitempty"`
	// Net is the pods' network traffic from the newest heartbeat.
	Net *protocol.NetSummary `json:"net,omitempty"`
	// Metrics is the newest heartbeat's metrics snapshot, nil when the
	// device keeps none.
	Metrics *protocol.MetricsSnapshot `json:"metrics,omitempty"`
	// FencedAt is when the operator fenced the device (podhub fence
	// device); nil when it is not fenced.
	FencedAt *time.Time `json:"fencedAt,omitempty"`
	// Update is the device's newest report on an update order (podhub
	// update), nil before its first.
	Update *protocol.UpdateState `json:"update,omitempty"`
}

// DefaultDeviceTimeout is how long a device may be silent and still be
// Ready, when the hub is not told otherwise.
const DefaultDeviceTimeout = 90 * time.Second

// Devices lists every device, Ready when online and heard from within
// timeout.
func (f *Fleet) Devices(now time.Time, timeout time.Duration) ([]Device, error) {
	return f.devices(now, timeout, "")
}

// devices lists one device (id) or all ("").
func (f *Fleet) devices(now time.Time, timeout time.Duration, id string) ([]Device, error) {
	rows, err := f.db.Query(`SELECT d.id, d.labels, d.device_labels, d.online, d.last_seen, d.version, d.node, d.net, d.metrics, d.created,
		d.instance, d.prev_instance, d.duplicate_until, d.fenced_at,
		(SELECT COUNT(*) FROM mirrors m WHERE m.device = d.id),
		COALESCE((SELECT generation FROM desired WHERE device = d.id), 0),
		COALESCE((SELECT observed FROM acks WHERE device = d.id), 0),
		(SELECT state FROM update_states WHERE device = d.id)
		FROM devices d WHERE ? = '' OR d.id = ? ORDER BY d.id`, id, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Device
	for rows.Next() {
		var d Device
		var labels, own, node, net, metrics, update []byte
		var lastSeen, dupUntil, fencedAt, created int64
		var instance, prev string
		if err := rows.Scan(&d.ID, &labels, &own, &d.Online, &lastSeen, &d.Version, &node, &net, &metrics, &created, &instance, &prev, &dupUntil, &fencedAt,
			&d.Pods, &d.Generation, &d.ObservedGeneration, &update); err != nil {
			return nil, err
		}
		d.Labels = map[string]string{}
		mergeLabels(d.Labels, own, labels)
		d.judge(now, timeout, lastSeen, dupUntil, fencedAt)
		if created > 0 {
			d.Created = time.UnixMilli(created)
		}
		if d.DuplicateID {
			d.Instances = []string{prev, instance}
		}
		if len(node) > 0 {
			d.Node = &v1.NodeStatus{}
			json.Unmarshal(node, d.Node)
		}
		if len(net) > 0 {
			d.Net = &protocol.NetSummary{}
			json.Unmarshal(net, d.Net)
		}
		if len(metrics) > 0 {
			d.Metrics = &protocol.MetricsSnapshot{}
			json.Unmarshal(metrics, d.Metrics)
		}
		if len(update) > 0 {
			d.Update = &protocol.UpdateState{}
			json.Unmarshal(update, d.Update)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// mergeLabels decodes a device's own labels (only DeviceLabelPrefix
// keys are stored) and then the operator's into into, the operator's
// winning. Both go into the one map: a map of the operator's, copied
// over, doubled a listing's garbage. A null is skipped (it would make
// the map nil), though SetLabels writes none.
func mergeLabels(into map[string]string, own, operator []byte) {
	for _, raw := range [][]byte{own, operator} {
		if string(raw) != "null" {
			json.Unmarshal(raw, &into)
		}
	}
}

// GetDevice returns one device.
func (f *Fleet) GetDevice(id string, now time.Time, timeout time.Duration) (Device, error) {
	ds, err := f.devices(now, timeout, id)
	if err != nil {
		return Device{}, err
	}
	if len(ds) == 0 {
		return Device{}, fmt.Errorf("device %q: %w", id, ErrNotFound)
	}
	return ds[0], nil
}

// ErrNotFound is a device or pod the hub does not know (one sentinel
// with workloaddb's, so the API answers 404 to either).
var ErrNotFound = workloaddb.ErrNotFound

// SetLabels merges labels into a device's; an empty value removes one.
// Labelling is the operator's: it adds a device the fleet did not know.
func (f *Fleet) SetLabels(id string, set map[string]string) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	if err := protocol.ValidDeviceID(id); err != nil {
		return err
	}
	for k, v := range set {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO devices (id, created) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`, id, time.Now().UnixMilli()); err != nil {
		return err
	}
	var raw []byte
	if err := tx.QueryRow(`SELECT labels FROM devices WHERE id = ?`, id).Scan(&raw); err != nil {
		return err
	}
	labels := map[string]string{}
	json.Unmarshal(raw, &labels)
	for k, v := range set {
		if v == "" {
			delete(labels, k)
		} else {
			labels[k] = v
		}
	}
	raw, _ = json.Marshal(labels)
	if _, err := tx.Exec(`UPDATE devices SET labels = ? WHERE id = ?`, raw, id); err != nil {
		return err
	}
	return f.commit(tx, fleetwatch.Note{Device: id, What: fleetwatch.Node})
}

// Select lists the devices whose labels match every k=v of selector. A
// device's own labels can match only keys under protocol.DeviceLabelPrefix,
// which an operator chooses to select on; every other key is the
// operator's.
func (f *Fleet) Select(selector map[string]string) ([]string, error) {
	// Only the labels: the whole listing decodes every device's node
	// status, most of an apply's cost at a few thousand devices.
	rows, err := f.db.Query(`SELECT id, labels, device_labels FROM devices ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	// One map, emptied for each device: a selector at a few thousand
	// devices made two maps per device, most of an apply's garbage
	// before its first document.
	merged := map[string]string{}
	for rows.Next() {
		var id string
		var labels, own []byte
		if err := rows.Scan(&id, &labels, &own); err != nil {
			return nil, err
		}
		// As in devices: the device's own labels, the operator's winning.
		clear(merged)
		mergeLabels(merged, own, labels)
		match := true
		for k, v := range selector {
			if merged[k] != v {
				match = false
			}
		}
		if match {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// MirrorPods lists the mirror pods of one device ("" for all), marked with
// their device. Those of a device that is not Ready have phase Unknown:
// the hub cannot tell what they do, and starts nothing in their place.
func (f *Fleet) MirrorPods(device string, now time.Time, timeout time.Duration) ([]v1.Pod, error) {
	devices, err := f.devices(now, timeout, device)
	if err != nil {
		return nil, err
	}
	var out []v1.Pod
	for _, d := range devices {
		ms, err := f.Mirrors(d.ID)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			var p v1.Pod
			if err := json.Unmarshal(m.Pod, &p); err != nil {
				continue
			}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[AnnotationDevice] = d.ID
			p.Spec.NodeName = d.ID // bound to its device, as a pod to its node
			if !d.Ready {
				p.Status.Phase = v1.PodUnknown
				p.Status.Reason = "NodeLost"
				p.Status.Message = fmt.Sprintf("device %s has not been heard from since %s", d.ID, d.LastSeen.Format(time.RFC3339))
				for i := range p.Status.ContainerStatuses {
					p.Status.ContainerStatuses[i].Ready = false
				}
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == v1.PodReady {
						p.Status.Conditions[i].Status = v1.ConditionUnknown
						p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(now)
					}
				}
			}
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := out[i].Annotations[AnnotationDevice], out[j].Annotations[AnnotationDevice]; a != b {
			return a < b
		}
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}

// AddDevice adds a device to the fleet (the operator's enrolment); it is
// a no-op for a known one. Reports are believed only from known devices.
func (f *Fleet) AddDevice(id string) error {
	defer f.changes.Deliver(id, fleetwatch.Node)
	if err := protocol.ValidDeviceID(id); err != nil {
		return err
	}
	_, err := f.exec(fleetwatch.Note{Device: id, What: fleetwatch.Node},
		`INSERT INTO devices (id, created) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`, id, time.Now().UnixMilli())
	return err
}
