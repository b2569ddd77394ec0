package kinds

import (
	policyv1 "k8s.io/api/policy/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// setPDBDefaults gives a PodDisruptionBudget its namespace; policy/v1 has
// no other default (no unhealthyPodEvictionPolicy means IfHealthyBudget).
func setPDBDefaults(pdb *policyv1.PodDisruptionBudget) {
	if pdb.Namespace == "" {
		pdb.Namespace = "default"
	}
}

// validatePDB is ValidatePodDisruptionBudget: not both minAvailable and
// maxUnavailable, each a non-negative integer or a percentage up to
// 100%, a valid selector, a known unhealthyPodEvictionPolicy. As in
// policy/v1, neither bound is valid too (the budget then allows no
// disruption), and an empty selector selects every pod of the namespace.
func validatePDB(pdb *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := validateMeta(&pdb.ObjectMeta)
	spec := field.NewPath("spec")
	s := &pdb.Spec
	if s.MinAvailable != nil && s.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(spec, s, "minAvailable and maxUnavailable cannot be both set"))
	}
	if s.MinAvailable != nil {
		p := spec.Child("minAvailable")
		n, percent, verrs := intOrPercent(s.MinAvailable, p)
		errs = append(errs, verrs...)
		errs = append(errs, notOver100(s.MinAvailable, n, percent, p)...)
	}
	if s.MaxUnavailable != nil {
		p := spec.Child("maxUnavailable")
		n, percent, verrs := intOrPercent(s.MaxUnavailable, p)
		errs = append(errs, verrs...)
		errs = append(errs, notOver100(s.MaxUnavailable, n, percent, p)...)
	}
	errs = append(errs, metavalidation.ValidateLabelSelector(s.Selector, metavalidation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
	if pol := s.UnhealthyPodEvictionPolicy; pol != nil && *pol != policyv1.IfHealthyBudget && *pol != policyv1.AlwaysAllow {
		errs = append(errs, field.NotSupported(spec.Child("unhealthyPodEvictionPolicy"), *pol,
			[]string{string(policyv1.AlwaysAllow), string(policyv1.IfHealthyBudget)}))
	}
	return errs
}
