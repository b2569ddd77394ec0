// Package priority resolves pods' priorities from PriorityClasses: the two
// built-in system classes and scheduling.k8s.io/v1 files from a directory.
package priority

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/pod/manifest"
)

// Values of the built-in classes and the limits on user classes.
const (
	SystemNodeCritical        = 2000001000
	SystemClusterCritical     = 2000000000
	HighestUserDefinable      = 1000000000
	SystemNodeCriticalName    = "system-node-critical"
	SystemClusterCriticalName = "system-cluster-critical"
)

// Class is one PriorityClass.
type Class struct {
	Name             string
	Value            int32
	GlobalDefault    bool
	PreemptionPolicy v1.PreemptionPolicy
	File             string // where it was defined ("" for built-ins)
}

// Classes is a set of PriorityClasses by name.
type Classes struct {
	byName map[string]Class
	def    *Class
}

// Builtin returns the two system classes.
func Builtin() Classes {
	c := Classes{byName: map[string]Class{}}
	for name, v := range map[string]int32{SystemNodeCriticalName: SystemNodeCritical, SystemClusterCriticalName: SystemClusterCritical} {
		c.byName[name] = Class{Name: name, Value: v, PreemptionPolicy: v1.PreemptLowerPriority}
	}
	return c
}

// IsCritical reports whether a priority is critical: such pods are always
// admitted and never evicted. Unlike the kubelet, podvisor does not count
// every static pod as critical: every pod it runs is one.
func IsCritical(priority int32) bool { return priority >= SystemClusterCritical }

// LoadDir adds the PriorityClasses of every manifest file in dir to the
// built-ins. A bad file is reported, named, and skipped; a missing
// directory means no user classes.
func LoadDir(dir string) (Classes, []error) {
	c := Builtin()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, []error{fmt.Errorf("priority classes %s: %w", dir, err)}
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || manifest.Ignored(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		classes, err := decodeFile(path)
		if err == nil {
			err = c.add(classes)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	return c, errs
}

func decodeFile(path string) ([]Class, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Class
	for i, doc := range strings.Split(string(data), "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		var pc schedulingv1.PriorityClass
		strict, err := kjson.UnmarshalStrict(js, &pc)
		if err == nil && len(strict) > 0 {
			err = strict[0]
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if pc.APIVersion != "scheduling.k8s.io/v1" || pc.Kind != "PriorityClass" {
			return nil, fmt.Errorf("document %d: apiVersion %q kind %q: want scheduling.k8s.io/v1 PriorityClass", i+1, pc.APIVersion, pc.Kind)
		}
		if err := validate(&pc); err != nil {
			return nil, fmt.Errorf("document %d: PriorityClass %q: %w", i+1, pc.Name, err)
		}
		policy := v1.PreemptLowerPriority
		if pc.PreemptionPolicy != nil {
			policy = *pc.PreemptionPolicy
		}
		out = append(out, Class{Name: pc.Name, Value: pc.Value, GlobalDefault: pc.GlobalDefault, PreemptionPolicy: policy, File: path})
	}
	return out, nil
}

func validate(pc *schedulingv1.PriorityClass) error {
	for _, msg := range validation.IsDNS1123Subdomain(pc.Name) {
		return fmt.Errorf("metadata.name: Invalid value: %q: %s", pc.Name, msg)
	}
	if strings.HasPrefix(pc.Name, "system-") {
		return fmt.Errorf("metadata.name: the prefix \"system-\" is reserved for built-in classes")
	}
	if pc.Value > HighestUserDefinable {
		return fmt.Errorf("value: Invalid value: %d: must be at most %d", pc.Value, HighestUserDefinable)
	}
	if p := pc.PreemptionPolicy; p != nil && *p != v1.PreemptLowerPriority && *p != v1.PreemptNever {
		return fmt.Errorf("preemptionPolicy: Unsupported value: %q: supported values: PreemptLowerPriority, Never", *p)
	}
	return nil
}

func (c *Classes) add(classes []Class) error {
	def := c.def
	for i, pc := range classes {
		if old, ok := c.byName[pc.Name]; ok {
			return fmt.Errorf("PriorityClass %q is already defined in %s", pc.Name, orBuiltin(old.File))
		}
		if pc.GlobalDefault {
			if def != nil {
				return fmt.Errorf("PriorityClass %q: globalDefault is already set by %q", pc.Name, def.Name)
			}
			def = &classes[i]
		}
	}
	for _, pc := range classes {
		c.byName[pc.Name] = pc
		if pc.GlobalDefault {
			d := pc
			c.def = &d
		}
	}
	return nil
}

func orBuiltin(file string) string {
	if file == "" {
		return "the built-in classes"
	}
	return file
}

// Names lists the known classes.
func (c Classes) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Resolve sets a pod's priority and preemption policy from its class, or
// from the global default (whose name it also sets in
// spec.priorityClassName; priority 0 without one), as the API server's
// Priority admission does. An unknown class is an error naming it.
func (c Classes) Resolve(p *v1.Pod) error {
	name := p.Spec.PriorityClassName
	var class Class
	switch {
	case name != "":
		var ok bool
		if class, ok = c.byName[name]; !ok {
			return fmt.Errorf("spec.priorityClassName: no PriorityClass with name %q was found (known: %s)", name, strings.Join(c.Names(), ", "))
		}
	case c.def != nil:
		// Admission names the default class in the pod as well.
		class = *c.def
		name = class.Name
		p.Spec.PriorityClassName = name
	default:
		class = Class{PreemptionPolicy: v1.PreemptLowerPriority}
	}
	if p.Spec.Priority != nil && *p.Spec.Priority != class.Value {
		return fmt.Errorf("spec.priority: %d does not match the value %d of PriorityClass %q; leave it unset", *p.Spec.Priority, class.Value, name)
	}
	v := class.Value
	p.Spec.Priority = &v
	if p.Spec.PreemptionPolicy == nil {
		policy := class.PreemptionPolicy
		p.Spec.PreemptionPolicy = &policy
	}
	return nil
}
