package devicelink

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Apply adds or replaces pods (by namespace/name) in a device's desired
// state, as the next generation, signed and published retained. Pods are
// checked as the device will check them: any invalid pod refuses the
// whole apply, with every reason.
func (h *Link) Apply(device string, pods []json.RawMessage) (int64, error) {
	gens, err := h.ApplyTo([]string{device}, pods)
	if len(gens) == 1 {
		return gens[0], err
	}
	return 0, err
}

// ApplyTo is Apply to each of devices, in order: the pods are checked
// once, and the documents stored a batch per transaction and published
// once stored. It stops at the first device whose document cannot be
// made; gens holds the generations of the devices before it.
func (h *Link) ApplyTo(devices []string, pods []json.RawMessage) (gens []int64, err error) {
	if err := checkApplied(pods); err != nil {
		return nil, err
	}
	for _, dev := range devices {
		f, err := h.fleet.Fence(dev)
		switch {
		case err != nil && !errors.Is(err, fleetdb.ErrNotFound):
			return nil, fmt.Errorf("device %s: reading its fence: %w", dev, err)
		case err == nil && f.Fenced():
			return nil, fmt.Errorf("device %s is fenced (podhub fence device): it gets no pods until the fence is lifted", dev)
		}
	}
	replaced := map[string]bool{}
	for _, raw := range pods {
		ns, name := PodKey(raw)
		replaced[ns+"/"+name] = true
	}
	return h.updateAll(devices, func(current []json.RawMessage) []json.RawMessage {
		keep := current[:0:0]
		for _, raw := range current {
			ns, name := PodKey(raw)
			if !replaced[ns+"/"+name] {
				keep = append(keep, raw)
			}
		}
		return append(keep, pods...)
	})
}

// AnnotationScheduled marks the pods of a device's desired document that
// the scheduler placed, apart from those applied to the device by hand
// (apply --device/--selector), which it leaves alone.
const AnnotationScheduled = fleetdb.AnnotationScheduled

// checkApplied checks applied pods as a device will (the check depends
// on the pods only, not on the device).
func checkApplied(pods []json.RawMessage) error {
	check := protocol.Desired{Device: "check", Generation: 1, Pods: pods}
	decoded, results := protocol.DecodePods(&check, manifest.Decode)
	var reasons []string
	for _, r := range results {
		if !r.Accepted {
			reasons = append(reasons, r.Reason)
		}
	}
	for _, p := range decoded {
		// The scheduler takes the pods marked as its own off the device
		// when it pushes the ones it placed.
		if _, marked := p.Annotations[AnnotationScheduled]; marked {
			reasons = append(reasons, fmt.Sprintf("pod %q: metadata.annotations[%s]: Forbidden: marks the pods the hub's scheduler places; the next pass would take this one off the device",
				p.Name, AnnotationScheduled))
		}
	}
	if len(reasons) > 0 {
		return fmt.Errorf("refused: %v", reasons)
	}
	return nil
}

// Delete removes a pod from a device's desired state.
func (h *Link) Delete(device, namespace, name string) (int64, error) {
	if cur, err := h.fleet.Desired(device); err != nil || cur.Generation == 0 {
		if err == nil {
			err = fmt.Errorf("device %q has no hub pods: %w", device, fleetdb.ErrNotFound)
		}
		return 0, err
	}
	found := false
	gen, err := h.Update(device, func(current []json.RawMessage) []json.RawMessage {
		keep := current[:0:0]
		for _, raw := range current {
			ns, n := PodKey(raw)
			if ns == namespace && n == name {
				found = true
				continue
			}
			keep = append(keep, raw)
		}
		return keep
	})
	if err == nil && !found {
		return gen, fmt.Errorf("device %s has no hub pod %s/%s", device, namespace, name)
	}
	return gen, err
}

// Fence fences a device (podhub fence device): marked in the fleet, then
// its next desired document, stored and published, names every pod it
// had in a fence and gives it none. The scheduler's next pass deletes
// its hub pods and places them elsewhere.
func (h *Link) Fence(device string) (int64, error) {
	if err := h.fleet.SetFenced(device, h.now()); err != nil {
		return 0, err
	}
	return h.Update(device, func(current []json.RawMessage) []json.RawMessage { return current })
}

// Unfence lifts a device's fence once it is safe (fleetdb.Unfence) and
// publishes a document without it.
func (h *Link) Unfence(device string) (int64, error) {
	if err := h.fleet.Unfence(device); err != nil {
		return 0, err
	}
	return h.Update(device, func(current []json.RawMessage) []json.RawMessage { return current })
}

// Update makes a device's next desired document with change, stores it
// and publishes it.
func (h *Link) Update(device string, change func([]json.RawMessage) []json.RawMessage) (int64, error) {
	gens, err := h.updateAll([]string{device}, change)
	if len(gens) == 1 {
		return gens[0], err
	}
	return 0, err
}

// storeBatch bounds the documents stored in one transaction, so that the
// reports waiting for the database meanwhile wait for a batch, not for a
// whole fleet.
const storeBatch = 256

// updateAll makes each device's next generation with change, signs it,
// and stores a batch of documents in one transaction before publishing
// them; it stops at the first device whose document cannot be made.
func (h *Link) updateAll(devices []string, change func([]json.RawMessage) []json.RawMessage) (gens []int64, err error) {
	h.updating.Lock()
	defer h.updating.Unlock()
	for len(devices) > 0 && err == nil {
		n := min(len(devices), storeBatch)
		var docs []fleetdb.DesiredDoc
		for _, device := range devices[:n] {
			var next fleetdb.DesiredDoc
			if next, err = h.nextDoc(device, change); err != nil {
				break
			}
			docs = append(docs, next)
		}
		devices = devices[n:]
		if len(docs) == 0 {
			break
		}
		if serr := h.fleet.SaveDesiredAll(docs); serr != nil {
			return gens, serr
		}
		// The devices' object indexes go before the documents: a device
		// knows the objects its new pods reference are on their way (it
		// waits for them, quietly) before the pods arrive.
		if h.cfg.Objects != nil {
			next := make(map[string][]json.RawMessage, len(docs))
			for _, d := range docs {
				next[d.Device] = d.Pods
			}
			h.cfg.Objects.PrepareDesired(next)
		}
		// Stored first: a hub that dies here publishes them at its next start.
		for _, d := range docs {
			h.publishDesired(h.client, d.Device, d.Document)
			gens = append(gens, d.Generation)
			if h.cfg.Objects != nil {
				h.cfg.Objects.DesiredChanged(d.Device, d.Pods)
			}
		}
	}
	return gens, err
}

// nextDoc makes a device's next desired document, signed.
func (h *Link) nextDoc(device string, change func([]json.RawMessage) []json.RawMessage) (fleetdb.DesiredDoc, error) {
	if err := protocol.ValidDeviceID(device); err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	cur, err := h.fleet.Desired(device)
	if err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	fence, err := h.fleet.Fence(device)
	if err != nil && !errors.Is(err, fleetdb.ErrNotFound) {
		return fleetdb.DesiredDoc{}, err
	}
	next := fleetdb.DesiredDoc{Device: device, Generation: cur.Generation + 1, Pods: change(cur.Pods)}
	if next.Fence = fleetdb.NextFence(fence, slices.Concat(cur.Pods, next.Pods)); next.Fence != nil {
		// A fenced device runs nothing: every pod it had, or would have
		// been given, is named by the fence instead.
		next.Pods = []json.RawMessage{}
	}
	next.Document, err = protocol.Sign(protocol.Desired{Device: device, Generation: next.Generation, Pods: next.Pods, Fence: next.Fence}, h.cfg.Key)
	if err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	if len(next.Document) > protocol.MaxDesiredBytes {
		return fleetdb.DesiredDoc{}, fmt.Errorf("device %s: the desired document would be %d bytes, over the %d byte limit", device, len(next.Document), protocol.MaxDesiredBytes)
	}
	return next, nil
}

// PodKey reads a stored pod's namespace and name (stored pods were
// validated; the namespace defaults to "default").
func PodKey(raw json.RawMessage) (string, string) {
	var meta struct {
		Metadata struct{ Namespace, Name string } `json:"metadata"`
	}
	json.Unmarshal(raw, &meta)
	if meta.Metadata.Namespace == "" {
		meta.Metadata.Namespace = "default"
	}
	return meta.Metadata.Namespace, meta.Metadata.Name
}
