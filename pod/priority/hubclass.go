package priority

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// AnnotationHubClass carries, on a pod the hub scheduled, the value and
// preemption policy of its PriorityClass, as JSON
// {"value":1000,"preemptionPolicy":"Never"}: the hub's PriorityClasses
// are fleet-wide, and its signature vouches for the annotation. A class
// of the same name on the device wins.
const AnnotationHubClass = "podvisor.io/priority-class"

// HubClass is the annotation's content.
type HubClass struct {
	Value            int32               `json:"value"`
	PreemptionPolicy v1.PreemptionPolicy `json:"preemptionPolicy,omitempty"`
}

// ResolveHub resolves a hub pod's priority as Resolve does, except that
// a class the device lacks is taken from the pod's AnnotationHubClass,
// checked as a PriorityClass is: a user-definable value and a known
// preemption policy.
func (c Classes) ResolveHub(p *v1.Pod) error {
	name := p.Spec.PriorityClassName
	raw, carried := p.Annotations[AnnotationHubClass]
	if _, known := c.byName[name]; known || !carried || name == "" {
		return c.Resolve(p)
	}
	var hc HubClass
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hc); err != nil {
		return fmt.Errorf("metadata.annotations[%s]: %v", AnnotationHubClass, err)
	}
	if hc.Value > HighestUserDefinable {
		return fmt.Errorf("metadata.annotations[%s]: value %d is above %d, the highest a PriorityClass may have", AnnotationHubClass, hc.Value, HighestUserDefinable)
	}
	switch hc.PreemptionPolicy {
	case "":
		hc.PreemptionPolicy = v1.PreemptLowerPriority
	case v1.PreemptLowerPriority, v1.PreemptNever:
	default:
		return fmt.Errorf("metadata.annotations[%s]: preemptionPolicy %q: want PreemptLowerPriority or Never", AnnotationHubClass, hc.PreemptionPolicy)
	}
	if p.Spec.Priority != nil && *p.Spec.Priority != hc.Value {
		return fmt.Errorf("spec.priority: %d does not match the value %d of PriorityClass %q; leave it unset", *p.Spec.Priority, hc.Value, name)
	}
	v := hc.Value
	p.Spec.Priority = &v
	if p.Spec.PreemptionPolicy == nil {
		p.Spec.PreemptionPolicy = &hc.PreemptionPolicy
	}
	return nil
}
