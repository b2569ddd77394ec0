package objectlink

import (
	"errors"
	"fmt"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/chunks"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
)

// SealKey takes a device's announced sealing key (its topic's device
// must be the one it names): pinned when the hub has none for it (a
// device enrolled before keys were), accepted when it is the pinned
// one, otherwise refused, logged by fingerprint and kept for podhub
// describe device. A revoked device's are ignored.
func (l *Link) SealKey(dev string, payload []byte) {
	if len(payload) == 0 || l.isRevoked(dev) {
		return
	}
	if _, revoked, err := l.fleet.SealingKey(dev); err == nil && revoked {
		return
	}
	k, err := protocol.DecodeSealKey(payload)
	if err == nil && k.Device != dev {
		err = fmt.Errorf("seal key names device %q", k.Device)
	}
	if err == nil {
		_, err = seal.ParsePublicKey(k.PublicKey)
	}
	if err != nil {
		l.refuse(dev, protocol.KindSealKey, err)
		return
	}
	pinned, err := l.fleet.AnnounceSealKey(dev, k.PublicKey, l.cfg.Now())
	switch {
	case errors.Is(err, fleetdb.ErrSealKeyMismatch):
		l.refuse(dev, protocol.KindSealKey, fmt.Errorf("key %s: %w", fleetdb.SealKeyPrint(k.PublicKey), err))
		return
	case errors.Is(err, fleetdb.ErrUnknownDevice):
		l.refuse(dev, protocol.KindSealKey, err)
		return
	case err != nil:
		l.log.Error("storing a sealing key", "device", dev, "err", err)
		return
	}
	if pinned {
		l.log.Info("pinned the sealing key a device announced (first use)", "device", dev, "key", fleetdb.SealKeyPrint(k.PublicKey))
	}
}

// ObjectGet queues a device's request. Requests wait per device, merged:
// a fleet asking at once (a ConfigMap every device uses changed) is
// answered device by device without dropping any, and a device asking
// again before its turn adds nothing to the queue.
func (l *Link) ObjectGet(dev string, payload []byte) {
	if len(payload) == 0 || l.isRevoked(dev) {
		return
	}
	g, err := protocol.DecodeObjectGet(payload)
	if err != nil {
		l.refuse(dev, protocol.KindObjectGet, err)
		return
	}
	l.requests.add(dev, g.Refs)
}

// answerer answers the queued requests, device by device in the order
// they first asked.
func (l *Link) answerer() {
	defer l.wg.Done()
	for {
		select {
		case <-l.done:
			return
		case <-l.requests.wake:
		}
		for {
			dev, refs, ok := l.requests.next()
			if !ok {
				break
			}
			l.answer(dev, &protocol.ObjectGet{Refs: refs})
			select {
			case <-l.done:
				return
			default:
			}
		}
	}
}

// answer sends each ref of a request that is in the device's index, its
// current version, sealed for its pinned key. Refs outside the index
// are refused and counted; a device with no key known gets nothing (it
// announces its key and asks again); refs over its rate wait for its
// next request.
func (l *Link) answer(dev string, g *protocol.ObjectGet) {
	// The key and revocation from fleet.db, the truth: podhub device add
	// and revoke write there.
	pub, revoked, err := l.fleet.SealingKey(dev)
	if err != nil || revoked || len(pub) == 0 {
		if err != nil && !errors.Is(err, fleetdb.ErrUnknownDevice) {
			l.log.Error("reading a device's sealing key", "device", dev, "err", err)
		}
		return
	}
	key, err := seal.ParsePublicKey(pub)
	if err != nil {
		l.log.Error("a pinned sealing key does not parse; the device gets no objects until it is enrolled again", "device", dev, "err", err)
		return
	}
	l.mu.Lock()
	index := map[string]protocol.ObjectEntry{}
	if d := l.devices[dev]; d != nil && !l.revoked[dev] {
		for _, e := range d.entries {
			index[e.Key()] = e
		}
	}
	l.mu.Unlock()
	var denied []string
	for _, ref := range g.Refs {
		e, ok := index[ref.Key()]
		if !ok {
			denied = append(denied, ref.Key())
			continue
		}
		o, err := l.get(objects.Ref{Kind: objects.Kind(e.Kind), Namespace: e.Namespace, Name: e.Name})
		if errors.Is(err, objects.ErrNotFound) {
			continue // deleted: the next index says so
		}
		if err != nil {
			l.log.Error("reading an object a device asked for", "device", dev, "object", e.Key(), "err", err)
			continue
		}
		if !l.spend(dev, o.Size()) {
			continue
		}
		msg, err := l.seal(dev, o, key)
		if err != nil {
			l.log.Error("sealing an object", "device", dev, "object", e.Key(), "err", err)
			continue
		}
		l.publish(l.cfg.Topics.Device(dev, protocol.KindObject), false, msg)
	}
	if len(denied) > 0 {
		l.denied.Add(int64(len(denied)))
		l.refuse(dev, protocol.KindObjectGet, fmt.Errorf("%d object(s) not in the device's index refused, first %s", len(denied), denied[0]))
	}
}

// seal makes an object's message for a device: the signed header, the
// data sealed for its key and bound to this device and version.
func (l *Link) seal(dev string, o *objects.Object, key *seal.PublicKey) ([]byte, error) {
	e := Entry(o)
	sealed, err := seal.Seal(key, protocol.SealInfo(dev, e), protocol.EncodeData(o.Data))
	if err != nil {
		return nil, err
	}
	return protocol.EncodeObject(protocol.ObjectHeader{Device: dev, Entry: e, Type: string(o.Type)}, sealed, l.cfg.Key)
}

// minCost is what an object costs of its device's budget at least: each
// is a read, a sealing and a message, whatever its size.
const minCost = 4 << 10

// spend takes an object's cost from its device's budget, false when the
// budget is spent.
func (l *Link) spend(dev string, size int) bool {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.device(dev)
	if d.budget == nil {
		d.budget = chunks.NewBucket(l.cfg.Rate, float64(l.cfg.Limits.MaxBytes), now)
	}
	_, ok := d.budget.Reserve(max(size, minCost), now, 0)
	return ok
}

func (l *Link) isRevoked(dev string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.revoked[dev]
}

// refuse counts a refused message; the first few of each minute are
// logged and kept as the device's events, the rest summed up. No key
// bytes and no object data are ever in the reason.
func (l *Link) refuse(dev, kind string, err error) {
	log, suppressed := l.refused.Note()
	if suppressed > 0 {
		l.log.Warn("refused more object messages", "count", suppressed, "total", l.refused.Total())
	}
	if !log {
		return
	}
	l.log.Warn("refused an object message", "device", dev, "kind", kind, "err", err)
	if serr := l.fleet.SaveRejection(dev, fmt.Sprintf("%s: %v", l.cfg.Topics.Device(dev, kind), err), l.cfg.Now()); serr != nil {
		l.log.Error("storing a rejection", "device", dev, "err", serr)
	}
}
