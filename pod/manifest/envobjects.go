package manifest

import (
	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateEnvFrom is the API server's ValidateEnvFrom with
// RelaxedEnvironmentVariableValidation (GA): a prefix may be any
// printable ASCII but '='; each source names one ConfigMap or Secret.
func validateEnvFrom(srcs []v1.EnvFromSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range srcs {
		p := path.Index(i)
		if e.Prefix != "" {
			for _, msg := range validation.IsRelaxedEnvVarName(e.Prefix) {
				errs = append(errs, field.Invalid(p.Child("prefix"), e.Prefix, msg))
			}
		}
		n := 0
		if e.ConfigMapRef != nil {
			n++
			errs = append(errs, validateObjectName(e.ConfigMapRef.Name, p.Child("configMapRef", "name"))...)
		}
		if e.SecretRef != nil {
			n++
			errs = append(errs, validateObjectName(e.SecretRef.Name, p.Child("secretRef", "name"))...)
		}
		switch {
		case n == 0:
			errs = append(errs, field.Invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"))
		case n > 1:
			errs = append(errs, field.Invalid(path, "", "may not have more than one field specified at a time"))
		}
	}
	return errs
}

// validateKeySelector is the API server's check of a configMapKeyRef or
// secretKeyRef.
func validateKeySelector(name, key string, path *field.Path) field.ErrorList {
	errs := validateObjectName(name, path.Child("name"))
	if key == "" {
		return append(errs, field.Required(path.Child("key"), ""))
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(path.Child("key"), key, msg))
	}
	return errs
}

// validateObjectName is a ConfigMap's or Secret's name as a reference
// gives it (ValidateConfigMapName, ValidateSecretName: a DNS subdomain).
func validateObjectName(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}
