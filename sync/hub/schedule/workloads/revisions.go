package workloads

import (
	"cmp"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Annotations the controllers keep as Kubernetes does.
const (
	// AnnotationRevision is a Deployment's and its ReplicaSets' revision
	// (deployment.kubernetes.io/revision).
	AnnotationRevision = "deployment.kubernetes.io/revision"
	// AnnotationChangeCause is copied from a workload to the revision it
	// makes, for rollout history.
	AnnotationChangeCause = "kubernetes.io/change-cause"
	// AnnotationRestartedAt is what rollout restart sets on a template.
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
)

// Revision is one template a workload has had: a Deployment's
// ReplicaSet (by pod-template-hash) or a DaemonSet's ControllerRevision
// (by controller-revision-hash), numbered as Kubernetes numbers them.
type Revision struct {
	Number int64
	Hash   string
	// Template is set when this pass made the revision or made it the
	// newest again (a rollback); nil for a revision as stored.
	Template *v1.PodTemplateSpec
	// ChangeCause is the workload's kubernetes.io/change-cause when the
	// revision was made.
	ChangeCause string
	// Halted says why the failure threshold halted the rollout of this
	// revision; "" while it is not halted.
	Halted string
	// NoTemplate: the revision was numbered from pods made before the
	// hub kept revisions, and its template is unknown.
	NoTemplate bool
	// Kept is the stored template, read for StatefulSets only: their
	// pods of the current revision are made again from it.
	Kept *v1.PodTemplateSpec
}

// RevisionChange is a workload's whole set of revisions after a pass
// that changed it.
type RevisionChange struct {
	Kind, Namespace, Name string
	Revisions             []Revision
}

// revisionBook is one workload's revisions during its sync.
type revisionBook struct {
	revs    []Revision
	changed bool
}

// current is the revision of hash, or nil.
func (b *revisionBook) current(hash string) *Revision {
	for i := range b.revs {
		if b.revs[i].Hash == hash {
			return &b.revs[i]
		}
	}
	return nil
}

// maxOther is the highest revision number of a hash other than hash.
func (b *revisionBook) maxOther(hash string) int64 {
	var n int64
	for _, r := range b.revs {
		if r.Hash != hash {
			n = max(n, r.Number)
		}
	}
	return n
}

// newRevisionBook starts from the stored revisions and numbers the
// templates the workload's live pods carry that have none (pods made
// before revisions were kept), oldest pods first.
func newRevisionBook(stored []Revision, pods []Pod, hashOf func(Pod) string) *revisionBook {
	b := &revisionBook{revs: slices.Clone(stored)}
	slices.SortFunc(b.revs, func(x, y Revision) int { return cmp.Compare(x.Number, y.Number) })
	first := map[string]time.Time{}
	for _, p := range pods {
		if p.Terminating {
			continue // its revision may be pruned already: not made again
		}
		h := hashOf(p)
		if t, ok := first[h]; h != "" && (!ok || p.Created.Before(t)) {
			first[h] = p.Created
		}
	}
	var unknown []string
	for h := range first {
		if b.current(h) == nil {
			unknown = append(unknown, h)
		}
	}
	slices.SortFunc(unknown, func(x, y string) int { return cmp.Or(first[x].Compare(first[y]), cmp.Compare(x, y)) })
	for _, h := range unknown {
		b.revs = append(b.revs, Revision{Number: b.maxOther("") + 1, Hash: h, NoTemplate: true})
		b.changed = true
	}
	return b
}

// makeCurrent makes the revision of hash the newest, as the Deployment
// controller's getNewReplicaSet does: a new one numbered after the
// others (made says so), an older one numbered again (a rollback); in
// both the template is kept, and a halt of the revision is cleared.
func (b *revisionBook) makeCurrent(hash string, t *v1.PodTemplateSpec, changeCause string) (cur *Revision, made bool) {
	next := b.maxOther(hash) + 1
	cur = b.current(hash)
	if cur == nil {
		b.revs = append(b.revs, Revision{Number: next, Hash: hash, Template: t.DeepCopy(), ChangeCause: changeCause})
		b.changed = true
		return &b.revs[len(b.revs)-1], true
	}
	if cur.Number < next {
		cur.Number, cur.Template, cur.ChangeCause, cur.Halted = next, t.DeepCopy(), changeCause, ""
		b.changed = true
	} else if cur.NoTemplate {
		cur.Template, cur.NoTemplate = t.DeepCopy(), false // its pods' template is the workload's
		b.changed = true
	}
	return cur, false
}

// prune drops the oldest revisions other than hash beyond limit, as the
// Deployment controller's cleanupDeployment does, sparing those that
// still have pods.
func (b *revisionBook) prune(hash string, limit int32, hasPods func(hash string) bool) {
	var old []Revision
	for _, r := range b.revs {
		if r.Hash != hash {
			old = append(old, r)
		}
	}
	diff := len(old) - int(limit)
	if diff <= 0 {
		return
	}
	drop := map[string]bool{}
	for _, r := range old[:diff] {
		if !hasPods(r.Hash) {
			drop[r.Hash] = true
		}
	}
	if len(drop) == 0 {
		return
	}
	b.revs = slices.DeleteFunc(b.revs, func(r Revision) bool { return drop[r.Hash] })
	b.changed = true
}

// keep records the book in the pass's result when it changed.
func (k *controllers) keepRevisions(kind, namespace, name string, b *revisionBook) {
	if b.changed {
		slices.SortFunc(b.revs, func(x, y Revision) int { return cmp.Compare(x.Number, y.Number) })
		k.res.Revisions = append(k.res.Revisions, RevisionChange{Kind: kind, Namespace: namespace, Name: name, Revisions: b.revs})
	}
}
