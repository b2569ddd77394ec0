package main

import (
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
)

// describeEnvFrom lists a container's envFrom sources as kubectl does:
// the object, never its values.
func describeEnvFrom(w io.Writer, srcs []v1.EnvFromSource) {
	if len(srcs) == 0 {
		return
	}
	fmt.Fprintln(w, "    Environment Variables from:")
	for _, e := range srcs {
		from, name, optional := "ConfigMap", "", false
		if r := e.ConfigMapRef; r != nil {
			name, optional = r.Name, r.Optional != nil && *r.Optional
		} else if r := e.SecretRef; r != nil {
			from, name, optional = "Secret", r.Name, r.Optional != nil && *r.Optional
		}
		if e.Prefix != "" {
			from += fmt.Sprintf(" with prefix '%s'", e.Prefix)
		}
		fmt.Fprintf(w, "      %s\t%s\tOptional: %t\n", name, from, optional)
	}
}

// envSource is what kubectl describe shows of an env var: its value, or
// where it comes from (a ConfigMap's or Secret's key, never its value).
func envSource(e v1.EnvVar) string {
	f := e.ValueFrom
	switch {
	case f == nil:
		return e.Value
	case f.FieldRef != nil:
		return fmt.Sprintf("(%s:%s)", f.FieldRef.APIVersion, f.FieldRef.FieldPath)
	case f.ResourceFieldRef != nil:
		return fmt.Sprintf("(%s)", f.ResourceFieldRef.Resource)
	case f.SecretKeyRef != nil:
		return fmt.Sprintf("<set to the key '%s' in secret '%s'>\tOptional: %t", f.SecretKeyRef.Key, f.SecretKeyRef.Name,
			f.SecretKeyRef.Optional != nil && *f.SecretKeyRef.Optional)
	case f.ConfigMapKeyRef != nil:
		return fmt.Sprintf("<set to the key '%s' of config map '%s'>\tOptional: %t", f.ConfigMapKeyRef.Key, f.ConfigMapKeyRef.Name,
			f.ConfigMapKeyRef.Optional != nil && *f.ConfigMapKeyRef.Optional)
	}
	return ""
}
