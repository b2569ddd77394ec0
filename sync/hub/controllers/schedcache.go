package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// schedCache is what a scheduling pass remembers for the next, so that a
// pass over a fleet where little changed decodes and encodes only what
// did: the pods as decoded, keyed by a hash of their stored bytes, the
// pods as their devices get them, and, per device, the stored desired
// document whose scheduled pods were found to be what the pass wanted.
// Every entry is checked against the database's bytes before use, so a
// write by anything else (the API, an apply) only costs a decode.
type schedCache struct {
	// mu serialises the passes: one pass's cache is the next one's.
	mu   sync.Mutex
	seed maphash.Seed
	pods map[types.NamespacedName]cachedPod
	// devicePods is each pod as its device gets it (devicePod, encoded),
	// for the pod's stored bytes and the PriorityClasses of the time.
	devicePods map[types.NamespacedName]cachedDevicePod
	// pushed is, per device, the hash of its stored desired pods when
	// their scheduled part was last found equal to the pods the pass
	// wanted there, and the hash of those.
	pushed map[string]pushedDoc
}

type cachedPod struct {
	hash uint64 // of the stored bytes
	pod  *v1.Pod
}

type cachedDevicePod struct {
	pod, classes uint64 // hashes of the stored pod and of the classes
	raw          json.RawMessage
}

type pushedDoc struct{ stored, want uint64 }

func (c *schedCache) init() {
	if c.pods == nil {
		c.seed = maphash.MakeSeed()
		c.pods = map[types.NamespacedName]cachedPod{}
		c.devicePods = map[types.NamespacedName]cachedDevicePod{}
		c.pushed = map[string]pushedDoc{}
	}
}

func (c *schedCache) hash(b []byte) uint64 { return maphash.Bytes(c.seed, b) }

// hubPods reads every pod the hub holds, as workloaddb's HubPods does, decoding
// only those whose stored bytes changed since the last pass. The pods
// returned are shared with the cache: a caller copies before it changes
// one. hashes are the stored bytes' hashes.
func (c *schedCache) hubPods(w *workloaddb.Store) (pods []*v1.Pod, hashes map[types.NamespacedName]uint64, err error) {
	hashes = make(map[types.NamespacedName]uint64, len(c.pods))
	fresh := make(map[types.NamespacedName]cachedPod, len(c.pods))
	err = w.EachHubPod(func(k types.NamespacedName, raw []byte) error {
		h := c.hash(raw)
		cp, ok := c.pods[k]
		if !ok || cp.hash != h {
			p := &v1.Pod{}
			if err := json.Unmarshal(raw, p); err != nil {
				return fmt.Errorf("stored hub pod: %w", err)
			}
			cp = cachedPod{hash: h, pod: p}
		}
		fresh[k], hashes[k] = cp, h
		pods = append(pods, cp.pod)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	c.pods = fresh
	return pods, hashes, nil
}

// forget drops a pod the pass deleted.
func (c *schedCache) forget(k types.NamespacedName) { delete(c.pods, k) }

// remember keeps a pod the pass writes as the next pass reads it back:
// decoded from the bytes stored (if the write fails, the hash no longer
// matches what is stored and the next pass decodes that).
func (c *schedCache) remember(k types.NamespacedName, hash uint64, raw []byte) {
	p := &v1.Pod{}
	if err := json.Unmarshal(raw, p); err != nil {
		delete(c.pods, k)
		return
	}
	c.pods[k] = cachedPod{hash: hash, pod: p}
}

// devicePod is devicePod(p, class) encoded, from the cache when the pod's
// stored bytes (podHash) and the classes (classesHash) are those it was
// made from.
func (c *schedCache) devicePod(k types.NamespacedName, podHash, classesHash uint64, make func() *v1.Pod) json.RawMessage {
	if e, ok := c.devicePods[k]; ok && e.pod == podHash && e.classes == classesHash {
		return e.raw
	}
	raw, _ := json.Marshal(make())
	c.devicePods[k] = cachedDevicePod{pod: podHash, classes: classesHash, raw: raw}
	return raw
}

// pruneDevicePods drops the pods the hub no longer holds.
func (c *schedCache) pruneDevicePods(hashes map[types.NamespacedName]uint64) {
	for k := range c.devicePods {
		if _, ok := hashes[k]; !ok {
			delete(c.devicePods, k)
		}
	}
}

// storedDesired hashes every device's stored desired pods, without
// decoding them.
func (c *schedCache) storedDesired(f *fleetdb.Fleet) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := f.EachDesiredPods(func(dev string, raw []byte) { out[dev] = c.hash(raw) })
	return out, err
}

// scheduledMatch reads one device's stored desired pods and says whether
// their scheduled part is want, with the hash of what it read (a device
// without a document holds no pods).
func (c *schedCache) scheduledMatch(f *fleetdb.Fleet, dev string, want []json.RawMessage) (uint64, bool, error) {
	raw, err := f.DesiredPods(dev)
	if err != nil {
		return 0, false, err
	}
	var pods []json.RawMessage
	if raw != nil {
		if err := json.Unmarshal(raw, &pods); err != nil {
			return 0, false, fmt.Errorf("device %s: stored desired pods: %w", dev, err)
		}
	}
	var have []json.RawMessage
	for _, p := range pods {
		if scheduledPod(p) {
			have = append(have, p)
		}
	}
	return c.hash(raw), slices.EqualFunc(have, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }), nil
}

// hashPods hashes a device's wanted pods in order.
func (c *schedCache) hashPods(pods []json.RawMessage) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, p := range pods {
		h.Write(p)
		h.WriteByte(0)
	}
	return h.Sum64()
}
