package runtime

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// envObjects reads the ConfigMaps and Secrets a container's environment
// names, each once per Resolve, as the kubelet's makeEnvironmentVariables
// caches them: every variable from one object comes from one version of
// it. Its errors are the kubelet's, and never hold a value.
type envObjects struct {
	getter    objects.Getter
	namespace string
	read      map[objects.Ref]*objects.Object
}

// get is the object, or nil without an error when it is missing and
// optional (the variable or source is skipped).
func (o *envObjects) get(kind objects.Kind, name string, optional *bool) (*objects.Object, error) {
	ref := objects.Ref{Kind: kind, Namespace: o.namespace, Name: name}
	if obj, ok := o.read[ref]; ok {
		return obj, nil
	}
	var obj *objects.Object
	var err error
	if o.getter == nil {
		err = &objects.NotFoundError{Ref: ref} // no source yet: nothing is found
	} else {
		obj, err = o.getter.Get(ref)
	}
	if err != nil {
		if errors.Is(err, objects.ErrNotFound) && optional != nil && *optional {
			return nil, nil
		}
		return nil, err
	}
	if o.read == nil {
		o.read = map[objects.Ref]*objects.Object{}
	}
	o.read[ref] = obj
	return obj, nil
}

// envFrom sets the variables of a container's envFrom sources in order,
// a later source's key replacing an earlier one's; set is called for
// each, in the object's key order, saying whether it is a Secret's. Keys go in unchecked, as in the
// kubelet since RelaxedEnvironmentVariableValidation (GA): an object's
// keys are valid variable names by its own validation.
func (o *envObjects) envFrom(c *v1.Container, set func(name, value string, fromSecret bool)) error {
	for _, src := range c.EnvFrom {
		var obj *objects.Object
		var err error
		switch {
		case src.ConfigMapRef != nil:
			obj, err = o.get(objects.ConfigMap, src.ConfigMapRef.Name, src.ConfigMapRef.Optional)
		case src.SecretRef != nil:
			obj, err = o.get(objects.Secret, src.SecretRef.Name, src.SecretRef.Optional)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		for _, k := range obj.Keys() {
			set(src.Prefix+k, string(obj.Data[k]), src.SecretRef != nil)
		}
	}
	return nil
}

// keyRef is the value of an env var's configMapKeyRef or secretKeyRef;
// skip: it is optional and its object or key is missing, so the variable
// is not set at all.
func (o *envObjects) keyRef(f *v1.EnvVarSource) (value string, skip bool, err error) {
	var kind objects.Kind
	var name, key string
	var optional *bool
	switch {
	case f.ConfigMapKeyRef != nil:
		kind, name, key, optional = objects.ConfigMap, f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key, f.ConfigMapKeyRef.Optional
	case f.SecretKeyRef != nil:
		kind, name, key, optional = objects.Secret, f.SecretKeyRef.Name, f.SecretKeyRef.Key, f.SecretKeyRef.Optional
	default:
		return "", true, nil
	}
	obj, err := o.get(kind, name, optional)
	if err != nil {
		return "", false, err
	}
	if obj == nil {
		return "", true, nil
	}
	v, ok := obj.Data[key]
	if !ok {
		if optional != nil && *optional {
			return "", true, nil
		}
		return "", false, fmt.Errorf("couldn't find key %v in %s %v/%v", key, kind, o.namespace, name)
	}
	return string(v), false, nil
}
