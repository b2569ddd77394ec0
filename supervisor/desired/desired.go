// Package desired is what the device wants running: the pods of its
// manifest files and the pods its hub gave, each with its priority
// resolved and held to the device's policy, a file pod winning over a hub
// pod of the same name. The daemon's loop hands Pods.Desired to the
// lifecycle machine; this package never touches the machine itself.
package desired

import (
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podview"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Options configure Pods.
type Options struct {
	// ManifestDir is the directory of the device's own manifest files.
	ManifestDir string
	// ManifestResync and ManifestSettle are manifest.Dir's Resync and
	// Settle.
	ManifestResync, ManifestSettle time.Duration
	// AllowUntrustedManifests is manifest.Dir.AllowUntrusted.
	AllowUntrustedManifests bool
	// MaxObjects and MaxObjectBytes bound the ConfigMaps and Secrets of
	// the manifest files (manifest.Dir's).
	MaxObjects     int
	MaxObjectBytes int64
	// Policy is what the device allows pods, whatever their source.
	Policy Policy
	Log    *slog.Logger
}

// Pods merges the device's sources of pods into the set the machine is
// to run. Its methods are for the daemon's loop, except ExpectHub, which
// comes before the loop runs.
type Pods struct {
	log     *slog.Logger
	policy  Policy
	classes priority.Classes
	dir     *manifest.Dir
	// files is the manifest directory's last state, its pods resolved
	// and its rejected pods among the invalid rows.
	files manifest.State
	// hub are the pods the hub gave, stamped with their identity; events
	// queue pod events for the hub (nil: no hub attached).
	hub    []*v1.Pod
	events chan PodEvent
	// gate holds the hub's fence and the self-fencing leases (fence.go);
	// want is Desired's last answer, which Gate filters.
	gate gate
	want []*v1.Pod
	// retired: the daemon stops every pod before it exits, and nothing
	// may be desired again.
	retired bool
	// wanted are the keys of the set Desired last gave the machine.
	wanted map[string]bool
}

// New prepares the sources; SetClasses and SetFiles fill them.
func New(o Options) *Pods {
	dir := &manifest.Dir{Path: o.ManifestDir, Resync: o.ManifestResync, Settle: o.ManifestSettle, Log: o.Log}
	dir.AllowUntrusted = o.AllowUntrustedManifests
	dir.MaxObjects, dir.MaxObjectBytes = o.MaxObjects, o.MaxObjectBytes
	return &Pods{log: o.Log, policy: o.Policy, dir: dir}
}

// Dir is the manifest directory whose states SetFiles takes: the daemon
// watches and loads it, and seeds it with the file pods it restored.
func (s *Pods) Dir() *manifest.Dir { return s.dir }

// LocalImages is which local images the pod may use, by the device's
// policy (hub pods only the shared ones).
func (s *Pods) LocalImages(pod *v1.Pod) *runtime.LocalImages { return s.policy.LocalImages(pod) }

// SetClasses sets the device's PriorityClasses, which every pod's
// priority is resolved from.
func (s *Pods) SetClasses(c priority.Classes) { s.classes = c }

// SetFiles takes the manifest directory's state: pods that break the
// policy or name an unknown PriorityClass become invalid rows (since
// now). It returns the events for files invalid now that were not, or not
// for the same reason, before.
func (s *Pods) SetFiles(st manifest.State, now time.Time) []podview.Note {
	pods, rejected := resolveFilePods(st.Pods, s.policy, s.classes)
	st.Pods = pods
	for p, err := range rejected {
		st.Invalid = append(st.Invalid, manifest.Invalid{File: p.Annotations[manifest.AnnotationFile], Err: err, Since: now})
	}
	notes := podview.NewlyInvalid(s.files, st)
	s.files = st
	return notes
}

// Invalid are the manifest files rejected, shown as rows of their own.
func (s *Pods) Invalid() []manifest.Invalid { return s.files.Invalid }

// Wants reports whether the set Desired last gave the machine asks for
// namespace/name — a file pod or an accepted hub pod: a deleted pod of
// either is started again.
func (s *Pods) Wants(key string) bool { return s.wanted[key] }

// Retire makes Desired answer nothing from now on: the daemon is stopping
// every pod before it exits.
func (s *Pods) Retire() { s.retired, s.wanted = true, nil }

// Desired is what the machine is to run: every file pod, then the hub
// pods that may run here; each refused hub pod is logged. ok is false once
// retired: the machine's desired set is not to be touched again.
func (s *Pods) Desired() (pods []*v1.Pod, ok bool) {
	if s.retired {
		return nil, false
	}
	pods, refused := desiredPods(s.files.Pods, s.hub, s.policy, s.classes)
	s.wanted = make(map[string]bool, len(pods))
	for _, p := range pods {
		s.wanted[lifecycle.KeyOf(p)] = true
	}
	s.want = pods
	for _, r := range refused {
		key := r.pod.Namespace + "/" + r.pod.Name
		switch r.cause {
		case shadowed:
			s.log.Warn("hub pod shadowed by a manifest file of the same name", "pod", key)
		case byPolicy:
			// Accepted before under a laxer config: the device's word now wins.
			s.log.Warn("hub pod refused by this device's hub policy", "pod", key, "err", r.reason)
		default:
			s.log.Warn("hub pod refused", "pod", key, "err", r.reason)
		}
	}
	return pods, true
}
