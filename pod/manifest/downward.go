package manifest

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "k8s.io/api/core/v1"
)

// resourceFieldPaths are the container resources the downward API gives
// (the API server's validEnvResourceFieldPathExpressions; hugepages are not
// offered on devices).
var resourceFieldPaths = sets.New(
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage",
)

var (
	cpuDivisors   = sets.New("1m", "1")
	bytesDivisors = sets.New("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
)

// validateResourceFieldRef checks a resourceFieldRef as the API server's
// validateContainerResourceFieldSelector does: a volume's item must name
// its container; the divisor, when set, is one the resource allows.
func validateResourceFieldRef(fs *v1.ResourceFieldSelector, path *field.Path, volume bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case volume && fs.ContainerName == "":
		errs = append(errs, field.Required(path.Child("containerName"), ""))
	case fs.Resource == "":
		errs = append(errs, field.Required(path.Child("resource"), ""))
	case !resourceFieldPaths.Has(fs.Resource):
		errs = append(errs, field.NotSupported(path.Child("resource"), fs.Resource, sets.List(resourceFieldPaths)))
	}
	if fs.Divisor.IsZero() {
		return errs
	}
	switch fs.Resource {
	case "limits.cpu", "requests.cpu":
		if !cpuDivisors.Has(fs.Divisor.String()) {
			errs = append(errs, field.Invalid(path.Child("divisor"), fs.Resource, "only divisor's values 1m and 1 are supported with the cpu resource"))
		}
	case "limits.memory", "requests.memory":
		if !bytesDivisors.Has(fs.Divisor.String()) {
			errs = append(errs, field.Invalid(path.Child("divisor"), fs.Resource, "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource"))
		}
	case "limits.ephemeral-storage", "requests.ephemeral-storage":
		if !bytesDivisors.Has(fs.Divisor.String()) {
			errs = append(errs, field.Invalid(path.Child("divisor"), fs.Resource, "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource"))
		}
	}
	return errs
}
