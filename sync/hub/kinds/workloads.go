package kinds

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/pod/manifest"
)

// MaxReplicas bounds a Deployment's replicas: each is a pod the hub keeps
// in memory and in its database.
const MaxReplicas = 100000

// HighestUserDefinablePriority is the largest value a user's
// PriorityClass may have (scheduling.HighestUserDefinablePriority).
const HighestUserDefinablePriority = 1000000000

func setDeploymentDefaults(d *appsv1.Deployment) {
	if d.Namespace == "" {
		d.Namespace = "default"
	}
	s := &d.Spec
	if s.Replicas == nil {
		one := int32(1)
		s.Replicas = &one
	}
	if s.Strategy.Type == "" {
		s.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if s.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.Strategy.RollingUpdate == nil {
			s.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if s.Strategy.RollingUpdate.MaxUnavailable == nil {
			s.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
		if s.Strategy.RollingUpdate.MaxSurge == nil {
			s.Strategy.RollingUpdate.MaxSurge = &quarter
		}
	}
	if s.RevisionHistoryLimit == nil {
		ten := int32(10)
		s.RevisionHistoryLimit = &ten
	}
	if s.ProgressDeadlineSeconds == nil {
		six := int32(600)
		s.ProgressDeadlineSeconds = &six
	}
	defaultTemplate(&s.Template)
}

func setDaemonSetDefaults(ds *appsv1.DaemonSet) {
	if ds.Namespace == "" {
		ds.Namespace = "default"
	}
	s := &ds.Spec
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if s.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if s.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			one := intstr.FromInt32(1)
			s.UpdateStrategy.RollingUpdate.MaxUnavailable = &one
		}
		if s.UpdateStrategy.RollingUpdate.MaxSurge == nil {
			zero := intstr.FromInt32(0)
			s.UpdateStrategy.RollingUpdate.MaxSurge = &zero
		}
	}
	if s.RevisionHistoryLimit == nil {
		ten := int32(10)
		s.RevisionHistoryLimit = &ten
	}
	defaultTemplate(&s.Template)
}

// defaultTemplate gives a pod template the pod defaults.
func defaultTemplate(t *v1.PodTemplateSpec) {
	p := &v1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	manifest.SetDefaults(p)
	t.Spec = p.Spec
}

// validateMeta checks a namespaced workload's name, namespace, labels and
// annotations.
func validateMeta(m *metav1.ObjectMeta) field.ErrorList {
	path := field.NewPath("metadata")
	errs := validateName(m.Name, path.Child("name"))
	for _, msg := range validation.IsDNS1123Label(m.Namespace) {
		errs = append(errs, field.Invalid(path.Child("namespace"), m.Namespace, msg))
	}
	errs = append(errs, metavalidation.ValidateLabels(m.Labels, path.Child("labels"))...)
	return append(errs, apivalidation.ValidateAnnotations(m.Annotations, path.Child("annotations"))...)
}

// validateName checks an object's metadata.name as the API server does:
// required, and a DNS subdomain.
func validateName(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "name or generateName is required")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// validateTemplate checks a workload's selector and pod template: the
// selector is required, not empty and matches the template's labels; the
// template is a valid pod that restarts Always.
func validateTemplate(kind string, name string, sel *metav1.LabelSelector, t *v1.PodTemplateSpec) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if sel == nil {
		errs = append(errs, field.Required(spec.Child("selector"), ""))
	} else {
		errs = append(errs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
		if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(spec.Child("selector"), sel, "empty selector is invalid for "+strings.ToLower(kind)))
		} else if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && !s.Matches(labels.Set(t.Labels)) {
			errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
		}
	}
	tp := spec.Child("template")
	// The template is validated as the pod it makes; its paths are
	// rewritten under spec.template.
	p := &v1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: t.Spec}
	p.Name, p.Namespace = name, "default"
	for _, e := range manifest.Validate(p) {
		e.Field = tp.String() + "." + e.Field
		errs = append(errs, e)
	}
	errs = append(errs, validateScheduling(&t.Spec, tp.Child("spec"))...)
	if t.Spec.RestartPolicy != v1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), t.Spec.RestartPolicy, []string{string(v1.RestartPolicyAlways)}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		// The API server checks a Deployment's template as its ReplicaSet's.
		owner := map[string]string{"Deployment": "ReplicaSet"}[kind]
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in "+cmp.Or(owner, kind)+" is not Supported"))
	}
	if t.Spec.NodeName != "" {
		errs = append(errs, field.Forbidden(tp.Child("spec", "nodeName"), "the hub places a "+kind+"'s pods; use nodeSelector or affinity"))
	}
	return errs
}

func validateDeployment(d *appsv1.Deployment) field.ErrorList {
	errs := validateMeta(&d.ObjectMeta)
	errs = append(errs, validateFailureThreshold(d.Annotations)...)
	spec := field.NewPath("spec")
	s := &d.Spec
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*s.Replicas), spec.Child("replicas"))...)
	if *s.Replicas > MaxReplicas {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *s.Replicas, fmt.Sprintf("must be no more than %d (the hub's limit)", MaxReplicas)))
	}
	errs = append(errs, validateTemplate("Deployment", d.Name, s.Selector, &s.Template)...)
	sp := spec.Child("strategy")
	switch s.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.Strategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(sp.Child("rollingUpdate"), "may not be specified when strategy `type` is '"+string(appsv1.RecreateDeploymentStrategyType)+"'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		errs = append(errs, validateRollingUpdateDeployment(s.Strategy.RollingUpdate, sp.Child("rollingUpdate"))...)
	default:
		errs = append(errs, field.NotSupported(sp.Child("type"), s.Strategy.Type, []string{"Recreate", "RollingUpdate"}))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), spec.Child("minReadySeconds"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*s.RevisionHistoryLimit), spec.Child("revisionHistoryLimit"))...)
	if *s.ProgressDeadlineSeconds <= s.MinReadySeconds {
		errs = append(errs, field.Invalid(spec.Child("progressDeadlineSeconds"), *s.ProgressDeadlineSeconds, "must be greater than minReadySeconds"))
	}
	return errs
}

func validateDaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	errs := validateMeta(&ds.ObjectMeta)
	errs = append(errs, validateFailureThreshold(ds.Annotations)...)
	spec := field.NewPath("spec")
	s := &ds.Spec
	errs = append(errs, validateTemplate("DaemonSet", ds.Name, s.Selector, &s.Template)...)
	up := spec.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		errs = append(errs, validateRollingUpdateDaemonSet(s.UpdateStrategy.RollingUpdate, up.Child("rollingUpdate"))...)
	default:
		errs = append(errs, field.NotSupported(up.Child("type"), s.UpdateStrategy.Type, []string{"OnDelete", "RollingUpdate"}))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), spec.Child("minReadySeconds"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*s.RevisionHistoryLimit), spec.Child("revisionHistoryLimit"))...)
	return errs
}

// intOrPercent is ValidatePositiveIntOrPercent: a non-negative integer or
// a percentage ("25%"; no sign, no space). It returns the number held, 0
// when invalid (as the API server's getIntOrPercentValue), and whether it
// is a percentage.
func intOrPercent(v *intstr.IntOrString, p *field.Path) (int, bool, field.ErrorList) {
	if v == nil {
		return 0, false, nil
	}
	if v.Type != intstr.String {
		return int(v.IntVal), false, apivalidation.ValidateNonnegativeField(int64(v.IntVal), p)
	}
	var errs field.ErrorList
	for _, msg := range validation.IsValidPercent(v.StrVal) {
		errs = append(errs, field.Invalid(p, v.StrVal, msg))
	}
	if len(errs) > 0 {
		return 0, false, errs
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	if err != nil { // more digits than an int holds
		return 0, true, field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
	}
	return n, true, nil
}

// notOver100 is IsNotMoreThan100Percent.
func notOver100(v *intstr.IntOrString, n int, percent bool, p *field.Path) field.ErrorList {
	if !percent || n <= 100 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
}

// validateRollingUpdateDeployment is ValidateRollingUpdateDeployment:
// not both zero, maxUnavailable at most 100% (maxSurge may pass it).
func validateRollingUpdateDeployment(ru *appsv1.RollingUpdateDeployment, path *field.Path) field.ErrorList {
	up, sp := path.Child("maxUnavailable"), path.Child("maxSurge")
	unavailable, percent, errs := intOrPercent(ru.MaxUnavailable, up)
	surge, _, surgeErrs := intOrPercent(ru.MaxSurge, sp)
	errs = append(errs, surgeErrs...)
	if unavailable == 0 && surge == 0 {
		errs = append(errs, field.Invalid(up, ru.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
	}
	return append(errs, notOver100(ru.MaxUnavailable, unavailable, percent, up)...)
}

// validateRollingUpdateDaemonSet is ValidateRollingUpdateDaemonSet: both
// at most 100%, and exactly one of them not zero (a DaemonSet either
// surges or takes pods down, never both).
func validateRollingUpdateDaemonSet(ru *appsv1.RollingUpdateDaemonSet, path *field.Path) field.ErrorList {
	up, sp := path.Child("maxUnavailable"), path.Child("maxSurge")
	unavailable, unavailablePercent, errs := intOrPercent(ru.MaxUnavailable, up)
	surge, surgePercent, surgeErrs := intOrPercent(ru.MaxSurge, sp)
	errs = append(errs, surgeErrs...)
	errs = append(errs, notOver100(ru.MaxUnavailable, unavailable, unavailablePercent, up)...)
	errs = append(errs, notOver100(ru.MaxSurge, surge, surgePercent, sp)...)
	switch {
	case unavailable != 0 && surge != 0:
		errs = append(errs, field.Invalid(sp, ru.MaxSurge, "may not be set when maxUnavailable is non-zero"))
	case unavailable == 0 && surge == 0:
		errs = append(errs, field.Required(up, "cannot be 0 when maxSurge is 0"))
	}
	return errs
}

// setPriorityClassDefaults gives a PriorityClass the API server's
// default preemptionPolicy.
func setPriorityClassDefaults(pc *schedulingv1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		p := v1.PreemptLowerPriority
		pc.PreemptionPolicy = &p
	}
}

func validatePriorityClass(pc *schedulingv1.PriorityClass) field.ErrorList {
	path := field.NewPath("metadata")
	errs := validateName(pc.Name, path.Child("name"))
	if pc.Namespace != "" {
		errs = append(errs, field.Forbidden(path.Child("namespace"), "not allowed on this type"))
	}
	if strings.HasPrefix(pc.Name, "system-") {
		// The built-in classes exist already: none is the user's to apply.
		why := pc.Name + " is not a known system priority class"
		if pc.Name == "system-node-critical" || pc.Name == "system-cluster-critical" {
			why = pc.Name + " is built in"
		}
		errs = append(errs, field.Forbidden(path.Child("name"), "priority class names with 'system-' prefix are reserved for system use only. error: "+why))
	}
	errs = append(errs, metavalidation.ValidateLabels(pc.Labels, path.Child("labels"))...)
	if pc.Value > HighestUserDefinablePriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"), "maximum allowed value of a user defined priority is 1000000000"))
	}
	if pp := *pc.PreemptionPolicy; pp != v1.PreemptNever && pp != v1.PreemptLowerPriority {
		errs = append(errs, field.NotSupported(field.NewPath("preemptionPolicy"), pp, []string{string(v1.PreemptLowerPriority), string(v1.PreemptNever)}))
	}
	return errs
}
