package desired

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
)

// refusalCause says which rule kept a hub pod from running.
type refusalCause int

const (
	// shadowed: a manifest file on the device names a pod of the same
	// namespace/name, and the device's own configuration comes first.
	shadowed refusalCause = iota + 1
	// byPolicy: the device's policy for hub pods forbids it.
	byPolicy
	// byPriority: it names a PriorityClass the device does not have.
	byPriority
)

// hubRefusal is a hub pod that does not run here, and why.
type hubRefusal struct {
	pod    *v1.Pod
	cause  refusalCause
	reason string // for the hub's verdict on the pod
}

// desiredPods decides what the core runs: every file pod, then each hub
// pod that no file pod of the same namespace/name shadows, that the
// device's policy for hub pods allows and whose priority class the device
// knows (resolved, as a copy). Every other hub pod gets a refusal, in the
// hub's order. It is the one answer both to what runs (Desired) and
// to what the hub is told it cannot run (Conflicts).
func desiredPods(files, hub []*v1.Pod, policy Policy, classes priority.Classes) (run []*v1.Pod, refused []hubRefusal) {
	run = append(run, files...)
	fromFile := make(map[string]string, len(files))
	for _, p := range files {
		fromFile[p.Namespace+"/"+p.Name] = p.Annotations[manifest.AnnotationFile]
	}
	for _, p := range hub {
		key := p.Namespace + "/" + p.Name
		if file, ok := fromFile[key]; ok {
			refused = append(refused, hubRefusal{pod: p, cause: shadowed,
				reason: fmt.Sprintf("pod %s comes from the manifest file %s on the device", key, file)})
			continue
		}
		if err := policy.CheckHub(p); err != nil {
			refused = append(refused, hubRefusal{pod: p, cause: byPolicy, reason: err.Error()})
			continue
		}
		resolved := p.DeepCopy()
		if err := classes.ResolveHub(resolved); err != nil {
			refused = append(refused, hubRefusal{pod: p, cause: byPriority, reason: fmt.Sprintf("pod %q: %v", p.Name, err)})
			continue
		}
		run = append(run, resolved)
	}
	return run, refused
}

// resolveFilePods sets each manifest file pod's priority from its
// PriorityClass, on a copy; a pod naming an unknown class, or breaking
// the device's policy, is rejected, named, and not run.
func resolveFilePods(pods []*v1.Pod, policy Policy, classes priority.Classes) (ok []*v1.Pod, rejected map[*v1.Pod]error) {
	rejected = map[*v1.Pod]error{}
	for _, p := range pods {
		if err := policy.Check(p); err != nil {
			rejected[p] = err
			continue
		}
		c := p.DeepCopy()
		if err := classes.Resolve(c); err != nil {
			rejected[p] = fmt.Errorf("pod %q: %w", p.Name, err)
			continue
		}
		ok = append(ok, c)
	}
	return ok, rejected
}
