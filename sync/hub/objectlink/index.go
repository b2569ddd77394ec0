// Package objectlink gives each device the ConfigMaps and Secrets its
// pods reference, and nothing else (the API server's Node authorizer's
// rule): it keeps a signed index of them per device, retained, recomputed
// when the device's pods or one of those objects change, and answers a
// device's requests for index entries with the object, its data sealed
// for that one device's pinned key (sync/seal).
package objectlink

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Limits bound the objects one device is given.
type Limits struct {
	// MaxObjects is the most entries of a device's index.
	MaxObjects int
	// MaxBytes is the most data (keys and values, objects.Object.Size)
	// of the objects in a device's index.
	MaxBytes int64
}

// DefaultLimits are a device's bounds unless podhub.yaml says otherwise;
// a device takes as much by default (its objects: section).
var DefaultLimits = Limits{MaxObjects: 256, MaxBytes: 16 << 20}

// Index is what a device is given: the entries of its index (sorted by
// kind, namespace and name), and the objects left out, each with why.
type Index struct {
	Entries []protocol.ObjectEntry
	Omitted []string
}

// PodRefs are the objects a device's pods reference (in the pods' own
// namespaces, objects.Refs), each once: pods in namespace/name order,
// each pod's references in its order, so that which objects the bounds
// leave out is deterministic (the first ones in that order are kept).
func PodRefs(pods []*v1.Pod) []objects.Ref {
	pods = append([]*v1.Pod(nil), pods...)
	sort.SliceStable(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	var refs []objects.Ref
	seen := map[objects.Ref]bool{}
	for _, p := range pods {
		for _, u := range objects.Refs(p) {
			if !seen[u.Ref] {
				seen[u.Ref] = true
				refs = append(refs, u.Ref)
			}
		}
	}
	return refs
}

// Compute is a device's index: of the objects its pods reference
// (PodRefs), those that exist (get returns nil for one that does not),
// within lim.
func Compute(refs []objects.Ref, get func(objects.Ref) *objects.Object, lim Limits) Index {
	var ix Index
	var bytes int64
	for _, r := range refs {
		o := get(r)
		if o == nil {
			continue
		}
		size := int64(o.Size())
		switch {
		case len(ix.Entries) >= lim.MaxObjects:
			ix.Omitted = append(ix.Omitted, fmt.Sprintf("%s: over the device's limit of %d objects (objects.maxObjects in podhub.yaml)", r, lim.MaxObjects))
			continue
		case bytes+size > lim.MaxBytes:
			ix.Omitted = append(ix.Omitted, fmt.Sprintf("%s: %d bytes, over the device's limit of %d bytes of objects with the %d bytes before it (objects.maxBytes in podhub.yaml)",
				r, size, lim.MaxBytes, bytes))
			continue
		}
		bytes += size
		ix.Entries = append(ix.Entries, Entry(o))
	}
	sort.Slice(ix.Entries, func(i, j int) bool { return ix.Entries[i].Key() < ix.Entries[j].Key() })
	return ix
}

// Entry is an object's index entry.
func Entry(o *objects.Object) protocol.ObjectEntry {
	return protocol.ObjectEntry{Kind: string(o.Kind), Namespace: o.Namespace, Name: o.Name, UID: o.UID,
		ResourceVersion: o.ResourceVersion, Immutable: o.Immutable}
}

// SameEntries tells whether two sorted indexes name the same versions.
func SameEntries(a, b []protocol.ObjectEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Same(b[i]) || a[i].Immutable != b[i].Immutable {
			return false
		}
	}
	return true
}
