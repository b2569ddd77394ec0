package manifest

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateSeccompProfile is Kubernetes' check of a seccompProfile: a
// known type, and a localhostProfile (a path inside the device's profile
// directory) exactly when the type is Localhost.
func validateSeccompProfile(sp *v1.SeccompProfile, fp *field.Path) field.ErrorList {
	if sp == nil {
		return nil
	}
	var errs field.ErrorList
	switch sp.Type {
	case v1.SeccompProfileTypeLocalhost:
		if sp.LocalhostProfile == nil || *sp.LocalhostProfile == "" {
			errs = append(errs, field.Required(fp.Child("localhostProfile"), "must be set when seccomp type is Localhost"))
		} else {
			errs = append(errs, validateLocalDescendingPath(*sp.LocalhostProfile, fp.Child("localhostProfile"))...)
		}
		return errs
	case v1.SeccompProfileTypeRuntimeDefault, v1.SeccompProfileTypeUnconfined:
	case "":
		errs = append(errs, field.Required(fp.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(fp.Child("type"), sp.Type,
			[]string{string(v1.SeccompProfileTypeLocalhost), string(v1.SeccompProfileTypeRuntimeDefault), string(v1.SeccompProfileTypeUnconfined)}))
	}
	if sp.LocalhostProfile != nil {
		errs = append(errs, field.Invalid(fp.Child("localhostProfile"), sp.LocalhostProfile, "can only be set when seccomp type is Localhost"))
	}
	return errs
}
