package kinds

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var specPath = field.NewPath("spec")

// validateScheduling checks the fields the hub's scheduler reads, as the
// API server's pod validation does (manifest.Validate covers the rest).
func validateScheduling(s *v1.PodSpec, path *field.Path) field.ErrorList {
	errs := metavalidation.ValidateLabels(s.NodeSelector, path.Child("nodeSelector"))
	if a := s.Affinity; a != nil {
		ap := path.Child("affinity")
		if a.PodAffinity != nil {
			errs = append(errs, field.Forbidden(ap.Child("podAffinity"), "the hub's scheduler does not place by inter-pod affinity; use topologySpreadConstraints"))
		}
		if a.PodAntiAffinity != nil {
			errs = append(errs, field.Forbidden(ap.Child("podAntiAffinity"), "the hub's scheduler does not place by inter-pod anti-affinity; use topologySpreadConstraints"))
		}
		if na := a.NodeAffinity; na != nil {
			np := ap.Child("nodeAffinity")
			if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
				rp := np.Child("requiredDuringSchedulingIgnoredDuringExecution")
				if len(r.NodeSelectorTerms) == 0 {
					errs = append(errs, field.Required(rp.Child("nodeSelectorTerms"), "must have at least one node selector term"))
				}
				for i := range r.NodeSelectorTerms {
					errs = append(errs, validateTerm(&r.NodeSelectorTerms[i], rp.Child("nodeSelectorTerms").Index(i))...)
				}
			}
			for i, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
				pp := np.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
				if t.Weight < 1 || t.Weight > 100 {
					errs = append(errs, field.Invalid(pp.Child("weight"), t.Weight, "must be in the range 1-100"))
				}
				errs = append(errs, validateTerm(&t.Preference, pp.Child("preference"))...)
			}
		}
	}
	for i, t := range s.Tolerations {
		errs = append(errs, validateToleration(t, path.Child("tolerations").Index(i))...)
	}
	errs = append(errs, validateSpread(s.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
	if s.PriorityClassName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.PriorityClassName) {
			errs = append(errs, field.Invalid(path.Child("priorityClassName"), s.PriorityClassName, msg))
		}
	}
	if s.SchedulerName != "" && s.SchedulerName != v1.DefaultSchedulerName {
		// Kubernetes' default scheduler leaves such a pod to another; the
		// hub has no other, and would place it as its own.
		errs = append(errs, field.NotSupported(path.Child("schedulerName"), s.SchedulerName, []string{v1.DefaultSchedulerName}))
	}
	if pp := s.PreemptionPolicy; pp != nil && *pp != v1.PreemptNever && *pp != v1.PreemptLowerPriority {
		errs = append(errs, field.NotSupported(path.Child("preemptionPolicy"), *pp, []string{string(v1.PreemptLowerPriority), string(v1.PreemptNever)}))
	}
	return errs
}

func validateTerm(t *v1.NodeSelectorTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range t.MatchExpressions {
		rp := path.Child("matchExpressions").Index(i)
		errs = append(errs, metavalidation.ValidateLabelName(r.Key, rp.Child("key"))...)
		switch r.Operator {
		case v1.NodeSelectorOpIn, v1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case v1.NodeSelectorOpExists, v1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs = append(errs, field.Forbidden(rp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
			} else if _, err := strconv.ParseInt(r.Values[0], 10, 64); err != nil {
				errs = append(errs, field.Invalid(rp.Child("values").Index(0), r.Values[0], "must be an integer"))
			}
		default:
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}))
		}
		for j, v := range r.Values {
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(rp.Child("values").Index(j), v, msg))
			}
		}
	}
	for i, r := range t.MatchFields {
		rp := path.Child("matchFields").Index(i)
		if r.Key != metav1.ObjectNameField {
			errs = append(errs, field.NotSupported(rp.Child("key"), r.Key, []string{metav1.ObjectNameField}))
		}
		if r.Operator != v1.NodeSelectorOpIn && r.Operator != v1.NodeSelectorOpNotIn {
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, []string{"In", "NotIn"}))
		}
		if len(r.Values) != 1 {
			errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
		}
	}
	return errs
}

var validEffects = []string{string(v1.TaintEffectNoSchedule), string(v1.TaintEffectPreferNoSchedule), string(v1.TaintEffectNoExecute)}

func validateToleration(t v1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		errs = append(errs, metavalidation.ValidateLabelName(t.Key, path.Child("key"))...)
	}
	if t.Key == "" && t.Operator != v1.TolerationOpExists {
		errs = append(errs, field.Invalid(path.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
	}
	if t.TolerationSeconds != nil && t.Effect != v1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(path.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
	}
	switch t.Operator {
	case v1.TolerationOpEqual, "":
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(path.Child("value"), t.Value, msg))
		}
	case v1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(path.Child("value"), t.Value, "value must be empty when `operator` is 'Exists'"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("operator"), t.Operator, []string{string(v1.TolerationOpEqual), string(v1.TolerationOpExists)}))
	}
	if t.Effect != "" && !sets.New(validEffects...).Has(string(t.Effect)) {
		errs = append(errs, field.NotSupported(path.Child("effect"), t.Effect, validEffects))
	}
	return errs
}

func validateSpread(cs []v1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, c := range cs {
		p := path.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(p.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(p.Child("topologyKey"), "can not be empty"))
		} else {
			errs = append(errs, metavalidation.ValidateLabelName(c.TopologyKey, p.Child("topologyKey"))...)
		}
		switch c.WhenUnsatisfiable {
		case v1.DoNotSchedule, v1.ScheduleAnyway:
		default:
			errs = append(errs, field.NotSupported(p.Child("whenUnsatisfiable"), c.WhenUnsatisfiable, []string{string(v1.DoNotSchedule), string(v1.ScheduleAnyway)}))
		}
		pair := c.TopologyKey + "/" + string(c.WhenUnsatisfiable)
		if seen.Has(pair) {
			errs = append(errs, field.Duplicate(p, "{"+c.TopologyKey+", "+string(c.WhenUnsatisfiable)+"}"))
		}
		seen.Insert(pair)
		if c.MinDomains != nil {
			if *c.MinDomains <= 0 {
				errs = append(errs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "must be greater than 0"))
			} else if c.WhenUnsatisfiable != v1.DoNotSchedule {
				errs = append(errs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not "+string(c.WhenUnsatisfiable)))
			}
		}
		errs = append(errs, metavalidation.ValidateLabelSelector(c.LabelSelector, metavalidation.LabelSelectorValidationOptions{}, p.Child("labelSelector"))...)
		if len(c.MatchLabelKeys) > 0 && c.LabelSelector == nil {
			errs = append(errs, field.Forbidden(p.Child("matchLabelKeys"), "must not be specified when labelSelector is not set"))
		}
		inSelector := sets.New[string]()
		if c.LabelSelector != nil {
			for k := range c.LabelSelector.MatchLabels {
				inSelector.Insert(k)
			}
			for _, r := range c.LabelSelector.MatchExpressions {
				inSelector.Insert(r.Key)
			}
		}
		for j, k := range c.MatchLabelKeys {
			errs = append(errs, metavalidation.ValidateLabelName(k, p.Child("matchLabelKeys").Index(j))...)
			if inSelector.Has(k) {
				errs = append(errs, field.Invalid(p.Child("matchLabelKeys").Index(j), k, "exists in both matchLabelKeys and labelSelector"))
			}
		}
		for name, pol := range map[string]*v1.NodeInclusionPolicy{"nodeAffinityPolicy": c.NodeAffinityPolicy, "nodeTaintsPolicy": c.NodeTaintsPolicy} {
			if pol != nil && *pol != v1.NodeInclusionPolicyHonor && *pol != v1.NodeInclusionPolicyIgnore {
				errs = append(errs, field.NotSupported(p.Child(name), *pol, []string{string(v1.NodeInclusionPolicyHonor), string(v1.NodeInclusionPolicyIgnore)}))
			}
		}
	}
	return errs
}
