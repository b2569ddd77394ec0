package runtime

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// Registry holds the runtimes by the runtimeClassName that selects them.
type Registry struct {
	byName map[string]Runtime
	// fallback runs pods that name no registered class.
	fallback string
	// missing says why a class has no runtime on this device.
	missing map[string]string
}

// NewRegistry returns an empty registry; pods that name no registered
// runtime class (or none at all) go to the runtime named fallback.
func NewRegistry(fallback string) *Registry {
	return &Registry{byName: map[string]Runtime{}, fallback: fallback, missing: map[string]string{}}
}

// Register makes rt run the pods of runtime class name.
func (r *Registry) Register(name string, rt Runtime) { r.byName[name] = rt }

// Unavailable records why the runtime of a class is not on this device,
// for the error its pods get.
func (r *Registry) Unavailable(name, why string) { r.missing[name] = why }

// ClassOf is the runtime class a pod runs under.
func (r *Registry) ClassOf(pod *v1.Pod) string {
	if rc := pod.Spec.RuntimeClassName; rc != nil {
		if _, ok := r.byName[*rc]; ok {
			return *rc
		}
	}
	return r.fallback
}

// For returns the runtime of a pod, or an error saying why there is none.
func (r *Registry) For(pod *v1.Pod) (Runtime, error) {
	class := r.ClassOf(pod)
	if rt := r.byName[class]; rt != nil {
		return rt, nil
	}
	if why := r.missing[class]; why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	return nil, fmt.Errorf("runtime class %q is not available on this device", class)
}

// Named returns the runtime registered under name, or nil.
func (r *Registry) Named(name string) Runtime { return r.byName[name] }

// Classes returns the registered runtime classes in order.
func (r *Registry) Classes() []string {
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns the registered runtimes in class order.
func (r *Registry) All() []Runtime {
	out := make([]Runtime, 0, len(r.byName))
	for _, n := range r.Classes() {
		out = append(out, r.byName[n])
	}
	return out
}

// Claim makes a pod name class, where it would not run under it without
// (a pod rebuilt from what a runtime holds must say which one holds it).
func (r *Registry) Claim(pod *v1.Pod, class string) {
	if r.ClassOf(pod) != class {
		pod.Spec.RuntimeClassName = &class
	}
}
