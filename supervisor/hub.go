package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/manifest"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// HubAgent is the device's connection to its hub (sync/device.Agent).
type HubAgent interface {
	// Stored are the hub pods accepted before, to run from the start.
	Stored() (int64, []*v1.Pod, error)
	// Run keeps the connection until stop is closed.
	Run(stop <-chan struct{})
	// Publish queues status and event items for the hub.
	Publish(items []store.Item) error
}

// mirrorSettle gathers the status changes of a burst of steps into one
// outbox transaction.
const mirrorSettle = 100 * time.Millisecond

// AttachHub connects the daemon to a hub agent; call before Run.
func (d *Daemon) AttachHub(a HubAgent) {
	d.hub = a
	d.hubEvents = make(chan store.Item, 256)
}

// loadHubPods puts the stored hub pods into the desired set before the
// first reconciliation: a restarted daemon must not stop them while the
// hub is out of reach.
func (d *Daemon) loadHubPods() {
	if d.hub == nil {
		return
	}
	gen, pods, err := d.hub.Stored()
	if err != nil {
		d.log.Error("hub pods stored on this device cannot run", "err", err)
		return
	}
	d.setHubPods(gen, pods)
}

// setHubPods gives the hub's pods their identity (source hub) and makes
// them part of the desired set.
func (d *Daemon) setHubPods(gen int64, pods []*v1.Pod) {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		p = p.DeepCopy()
		manifest.Stamp(p, manifest.SourceHub, "")
		out = append(out, p)
	}
	d.hubPods = out
	d.log.Info("hub pods", "generation", gen, "pods", len(out))
	d.applyDesired()
}

// applyDesired hands the core the file pods and the hub pods. A file pod
// wins over a hub pod of the same name (the device's own configuration
// comes first; the hub was told when it sent the pod, if it was there).
func (d *Daemon) applyDesired() {
	if d.stoppingAll {
		return
	}
	pods := append([]*v1.Pod(nil), d.manifests.Pods...)
	files := map[string]bool{}
	for _, p := range d.manifests.Pods {
		files[p.Namespace+"/"+p.Name] = true
	}
	allowed, refused := d.checkHubPods(d.hubPods)
	for p, err := range refused {
		// Accepted before under a laxer config: the device's word now wins.
		d.log.Warn("stored hub pod refused by this device's hub policy", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	hub, rejected := d.resolvePriorities(allowed)
	for p, err := range rejected {
		d.log.Warn("hub pod refused", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	for _, p := range hub {
		if files[p.Namespace+"/"+p.Name] {
			d.log.Warn("hub pod shadowed by a manifest file of the same name", "pod", p.Namespace+"/"+p.Name)
			continue
		}
		pods = append(pods, p)
	}
	d.machine.SetDesired(pods)
}

// Conflicts implements device.Pods: the hub pods that cannot run here.
func (d *Daemon) Conflicts(pods []*v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	err := d.do(func() error {
		files := map[string]string{}
		for _, p := range d.manifests.Pods {
			files[p.Namespace+"/"+p.Name] = p.Annotations[manifest.AnnotationFile]
		}
		allowed, refused := d.checkHubPods(pods)
		_, rejected := d.resolvePriorities(allowed)
		for _, p := range pods {
			key := p.Namespace + "/" + p.Name
			if file, ok := files[key]; ok {
				out[key] = fmt.Sprintf("pod %s comes from the manifest file %s on the device", key, file)
			} else if err := refused[p]; err != nil {
				d.log.Warn("hub pod refused by this device's policy", "pod", key, "err", err)
				out[key] = err.Error()
			} else if err := rejected[p]; err != nil {
				out[key] = err.Error()
			}
		}
		return nil
	})
	return out, err
}

// checkHubPods splits the hub pods this device's policy for hub pods
// (security and hub in the config) allows from those it refuses.
func (d *Daemon) checkHubPods(pods []*v1.Pod) (allowed []*v1.Pod, refused map[*v1.Pod]error) {
	refused = map[*v1.Pod]error{}
	for _, p := range pods {
		if err := d.cfg.Policy.CheckHub(p); err != nil {
			refused[p] = err
			continue
		}
		allowed = append(allowed, p)
	}
	return allowed, refused
}

// ApplyHub implements device.Pods.
func (d *Daemon) ApplyHub(gen int64, pods []*v1.Pod) {
	for {
		err := d.do(func() error { d.setHubPods(gen, pods); return nil })
		if err == nil {
			return
		}
		d.log.Warn("applying hub pods; retrying", "generation", gen, "err", err)
	}
}

// hubEvent queues a pod event for the hub; a full queue drops it (the
// outbox would drop old events first anyway).
func (d *Daemon) hubEvent(key, typ, reason, msg string, at time.Time) {
	if d.hubEvents == nil {
		return
	}
	payload, _ := json.Marshal(protocol.Event{Time: at, Type: typ, Reason: reason, Message: msg})
	select {
	case d.hubEvents <- store.Item{Key: key, Kind: store.KindEvent, Payload: payload}:
	default:
	}
}

// mirror sends every pod's status to the hub when it changes, as the
// pod's newest mirror, and a pod's disappearance; it follows the API's
// view, so it costs the loop nothing.
func (d *Daemon) mirror(stop <-chan struct{}) {
	sent := map[string]*v1.Pod{}
	sentJSON := map[string][]byte{}
	var items []store.Item
	for {
		pods, _, changed := d.Pods()
		current := map[string]*v1.Pod{}
		for _, p := range pods {
			current[p.Namespace+"/"+p.Name] = p // the newest instance of a name comes last
		}
		for key, p := range current {
			if sent[key] == p {
				continue
			}
			b, err := json.Marshal(p)
			if err != nil || bytes.Equal(b, sentJSON[key]) {
				sent[key] = p
				continue
			}
			items = append(items, store.Item{Key: key, Kind: store.KindPod, Payload: b})
			sent[key], sentJSON[key] = p, b
		}
		for key := range sent {
			if current[key] == nil {
				items = append(items, store.Item{Key: key, Kind: store.KindPod})
				delete(sent, key)
				delete(sentJSON, key)
			}
		}
	events:
		for {
			select {
			case ev := <-d.hubEvents:
				items = append(items, ev)
			default:
				break events
			}
		}
		if len(items) > 0 {
			if err := d.hub.Publish(items); err != nil {
				// Forget what was sent: the next round queues every pod.
				d.log.Error("queueing statuses for the hub", "err", err)
				clear(sent)
				clear(sentJSON)
			}
			items = nil
		}
		select {
		case <-stop:
			return
		case <-changed:
		case ev := <-d.hubEvents:
			items = append(items, ev)
		}
		select {
		case <-stop:
			return
		case <-time.After(mirrorSettle):
		}
	}
}
