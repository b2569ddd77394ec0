// Package workloads is the controllers Kubernetes runs beside its
// scheduler, over the hub's workloads: the node lifecycle controller's
// taint-based eviction and the pod garbage collector (pods of devices
// gone, force deletion on fenced devices and past self-fencing leases),
// the DaemonSet controller (a pod per eligible device, rolling updates),
// the Deployment and ReplicaSet controllers (replicas, rollouts by
// strategy), the StatefulSet controller (stable identities, at most one
// copy of each) and the garbage collector of pods whose workload is
// gone. They decide which pods to create and delete; the
// scheduler (the parent package) owns the books and places the pods. The
// controllers read and change those books only through Cluster.
package workloads

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

// Labels the workload controllers put on their pods.
const (
	LabelPodTemplateHash    = appsv1.DefaultDeploymentUniqueLabelKey // pod-template-hash
	LabelControllerHash     = appsv1.ControllerRevisionHashLabelKey  // controller-revision-hash
	LabelTemplateGeneration = appsv1.DeprecatedTemplateGeneration    // pod-template-generation
)

// Deletion reasons the controllers give.
const (
	// ReasonNodeLost: the device is unreachable past the pod's toleration,
	// or gone from the fleet.
	ReasonNodeLost = "NodeLost"
	// ReasonTaint: a NoExecute taint the pod does not tolerate (long enough).
	ReasonTaint = "DeletionByTaintManager"
	// ReasonScaledDown: the Deployment has more pods than replicas.
	ReasonScaledDown = "ScaledDown"
	// ReasonOutdated: the pod's template is no longer the workload's.
	ReasonOutdated = "Outdated"
	// ReasonNotEligible: a DaemonSet pod on a device that no longer
	// matches its selector, affinity or taints.
	ReasonNotEligible = "NotEligible"
	// ReasonOwnerDeleted: the pod's workload is gone.
	ReasonOwnerDeleted = "OwnerDeleted"
	// ReasonPodGC: the pod is force-deleted — its device was fenced, or
	// its self-fencing lease ran out — as Kubernetes' pod garbage
	// collector force-deletes the pods of an out-of-service node.
	ReasonPodGC = "DeletionByPodGC"
	// ReasonStatefulSet: the StatefulSet controller deletes the pod (scale
	// down, update, a failed pod to recreate).
	ReasonStatefulSet = "StatefulSet"
)

// quiet is the logger the toleration helpers want; they log nothing we use.
var quiet = logr.Discard()

// Event is an event on an object, as its controller records it.
type Event struct {
	Kind, Namespace, Name string
	Type, Reason, Message string
}

// Node is a device as the controllers see it.
type Node struct {
	Name string
	Node *v1.Node
	// UnreachableSince is when the hub stopped hearing from the device,
	// on the hub's clock; zero while it is heard from.
	UnreachableSince time.Time
	// Fenced: the operator declared the device dead (fleet.Device.Fenced).
	Fenced bool
}

// Pod is a pod as the controllers see it, at the time it is read.
type Pod struct {
	Pod *v1.Pod
	Key types.NamespacedName
	// Created orders pods (creation time, or the pass's time for new ones).
	Created time.Time
	// Terminating pods count for no replica.
	Terminating bool
	// Node is the device the pod is on, "" while unplaced.
	Node string
	// Observed is what that device last reported of the pod.
	Observed Observed
}

// Observed is what a pod's device last reported of it (its mirror pod).
// Times are the hub's — when the hub received the report — never the
// device's clock, so a device with a skewed clock changes no decision.
type Observed struct {
	// Reported: the device has reported the pod since it was bound.
	Reported bool
	Phase    v1.PodPhase
	// Ready is the pod's Ready condition; ReadySince is when the hub
	// first received it True after it was last False (zero when not).
	Ready      bool
	ReadySince time.Time
	// Restarts is the sum of its containers' restart counts.
	Restarts int32
	// Failure is why the pod cannot run as it is, from a container's
	// waiting or terminated reason (CrashLoopBackOff, ErrImagePull,
	// CreateContainerConfigError, Error...); "" while nothing failed.
	Failure string
}

// Cluster is the scheduler's books, as the controllers read and change
// them. Every read reflects the changes made before it.
type Cluster interface {
	// Nodes are the devices, in name order.
	Nodes() []Node
	// Pods are every pod, in the pass's order.
	Pods() []Pod
	// Owned are the pods of a workload (Index), in the pass's order.
	Owned(index string) []Pod
	// Taken reports whether a pod of that name exists.
	Taken(types.NamespacedName) bool
	// Admit does the API server's admission to a new pod (it may change
	// the pod); an error is its refusal.
	Admit(p *v1.Pod) error
	// Count is how many pods the books hold.
	Count() int
	// Add puts an admitted new pod on the books, to be created.
	Add(p *v1.Pod)
	// Delete terminates a pod gracefully.
	Delete(pod types.NamespacedName, reason, message string)
	// ForceDelete forgets a pod at once, without waiting for its device
	// to confirm it stopped; its name stays taken until the next pass.
	ForceDelete(pod types.NamespacedName, reason, message string)
	// Event records an event.
	Event(Event)
}

// Budgets are the PodDisruptionBudgets of a pass, as the rollouts
// honour them: Disrupt says whether a pod may be taken down now, and
// spends a disruption of its budget if it takes one.
type Budgets interface {
	Disrupt(p Pod) bool
}

// Pass is what the controllers see besides the books.
type Pass struct {
	Now         time.Time
	DaemonSets  []*appsv1.DaemonSet
	Deployments []*appsv1.Deployment
	// StatefulSets are placed like the others, with at most one live
	// copy of each of their pods' identities.
	StatefulSets []*appsv1.StatefulSet
	// Owners are the live workloads the books file pods under.
	Owners *Owners
	// MaxPods bounds the pods the books hold (0: no bound); past it a new
	// pod is refused as a pod quota refuses it.
	MaxPods int
	// Budgets, when set, hold back a rollout's deletion of a pod its
	// PodDisruptionBudget does not allow to go now (nil: none).
	Budgets Budgets
	// Revisions are each workload's revisions as stored, by Index.
	Revisions map[string][]Revision
}

// Result is what a pass of the controllers decided besides the books:
// every workload's status, the revisions that changed, and when the
// next pass should run by itself (a pod becomes available after
// minReadySeconds, a progress deadline passes); zero for never.
type Result struct {
	Statuses  []Status
	Revisions []RevisionChange
	Wake      time.Time
}

// controllers is one pass of the controllers over the books.
type controllers struct {
	c       Cluster
	now     time.Time
	owners  *Owners
	maxPods int
	budgets Budgets
	// overQuota are the workloads refused a pod this pass for maxPods.
	overQuota map[types.NamespacedName]bool
	revisions map[string][]Revision
	res       *Result
}

// Sync runs the controllers in Kubernetes' order: the pods of devices
// gone and the taint-based evictions go first, then the DaemonSet and
// Deployment controllers make and delete pods, then the pods whose
// workload is gone are deleted. Each workload's sync is its own: one
// stuck or halted holds back no other.
func Sync(c Cluster, pass Pass) Result {
	k := &controllers{c: c, now: pass.Now, owners: pass.Owners, maxPods: pass.MaxPods, budgets: pass.Budgets,
		overQuota: map[types.NamespacedName]bool{}, revisions: pass.Revisions, res: &Result{}}
	k.deleteLost()
	k.evictTainted()
	k.forceDeleteUnreachable()
	k.runDaemonSets(pass.DaemonSets)
	k.runDeployments(pass.Deployments)
	k.runStatefulSets(pass.StatefulSets)
	k.deleteOrphans(pass.DaemonSets, pass.Deployments, pass.StatefulSets)
	return *k.res
}

// TemplateHash is a pod template's hash as a label value, the name part
// a Deployment's ReplicaSet and pods carry.
func TemplateHash(t *v1.PodTemplateSpec) string {
	h := fnv.New32a()
	b, _ := json.Marshal(t) // a decoded template always marshals
	h.Write(b)
	return utilrand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// maxGeneratedNameLength is the API server's limit on generateName's prefix.
const maxGeneratedNameLength = 63 - 5

// podName is generateName's name for a new pod, made deterministic: the
// prefix and five characters of the API server's alphabet drawn from a
// hash of the seed, skipping names already taken in the namespace.
func (k *controllers) podName(namespace, prefix, seed string) string {
	for i := 0; ; i++ {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%s/%d", prefix, seed, i)
		enc := utilrand.SafeEncodeString(strconv.FormatUint(h.Sum64(), 10))
		// generateName keeps the name within 63 characters.
		name := prefix[:min(len(prefix), maxGeneratedNameLength)] + enc[len(enc)-5:]
		if !k.c.Taken(types.NamespacedName{Namespace: namespace, Name: name}) {
			return name
		}
	}
}

// newPod is a pod from a workload's template, before admission.
func (k *controllers) newPod(meta metav1.ObjectMeta, t *v1.PodTemplateSpec, extra map[string]string, owner metav1.OwnerReference) *v1.Pod {
	p := &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         meta.Namespace,
			Labels:            map[string]string{},
			Annotations:       t.Annotations,
			OwnerReferences:   []metav1.OwnerReference{owner},
			CreationTimestamp: metav1.NewTime(k.now),
		},
		Spec: *t.Spec.DeepCopy(),
	}
	for key, v := range t.Labels {
		p.Labels[key] = v
	}
	for key, v := range extra {
		p.Labels[key] = v
	}
	return p
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes, BlockOwnerDeletion: &yes}
}

// available is a pod its device reports Ready for at least
// minReadySeconds (on the hub's clock). A pod merely placed is not.
func (k *controllers) available(p Pod, minReadySeconds int32) bool {
	o := p.Observed
	return o.Ready && !o.ReadySince.Add(time.Duration(minReadySeconds)*time.Second).After(k.now)
}

// mayDisrupt asks the pod's budget whether a rollout may take it down
// now, spending a disruption if so (Pass.Budgets). Kubernetes' own
// rollouts do not ask (only evictions do); the hub's do, so that an
// update never takes a budgeted workload below its budget.
func (k *controllers) mayDisrupt(p Pod) bool {
	return k.budgets == nil || k.budgets.Disrupt(p)
}

// deleteOrphans deletes pods whose controlling workload is gone, as the
// garbage collector does.
func (k *controllers) deleteOrphans(dss []*appsv1.DaemonSet, ds []*appsv1.Deployment, sts []*appsv1.StatefulSet) {
	live := make(map[string]bool, len(dss)+len(ds)+len(sts))
	for _, s := range sts {
		live[Index("StatefulSet", s.Namespace, s.Name)] = true
	}
	for _, d := range dss {
		live[Index("DaemonSet", d.Namespace, d.Name)] = true
	}
	for _, d := range ds {
		live[Index("Deployment", d.Namespace, d.Name)] = true
	}
	for _, p := range k.c.Pods() {
		ref := ControllerOf(p.Pod)
		if p.Terminating || ref == nil {
			continue
		}
		found := true
		if ref.Kind == "DaemonSet" || ref.Kind == "ReplicaSet" || ref.Kind == "StatefulSet" {
			found = live[k.owners.Key(p.Pod)]
		}
		if !found {
			k.c.Delete(p.Key, ReasonOwnerDeleted, fmt.Sprintf("%s %s was deleted", ref.Kind, ref.Name))
		}
	}
}

// sortedByName is a clone of workloads in namespace/name order.
func sortedByName[W metav1.Object](ws []W) []W {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b W) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return ws
}
