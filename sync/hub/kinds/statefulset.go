package kinds

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/pod/vocab"
)

// setStatefulSetDefaults is SetDefaults_StatefulSet (with the
// MaxUnavailableStatefulSet gate off: maxUnavailable only when written).
func setStatefulSetDefaults(s *appsv1.StatefulSet) {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	sp := &s.Spec
	if sp.PodManagementPolicy == "" {
		sp.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	if sp.UpdateStrategy.Type == "" {
		sp.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if sp.UpdateStrategy.RollingUpdate == nil {
			sp.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if ru := sp.UpdateStrategy.RollingUpdate; sp.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && ru != nil && ru.Partition == nil {
		ru.Partition = new(int32)
	}
	if sp.PersistentVolumeClaimRetentionPolicy == nil {
		sp.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	if p := sp.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted == "" {
		p.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if p := sp.PersistentVolumeClaimRetentionPolicy; p.WhenScaled == "" {
		p.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if sp.Replicas == nil {
		one := int32(1)
		sp.Replicas = &one
	}
	if sp.RevisionHistoryLimit == nil {
		ten := int32(10)
		sp.RevisionHistoryLimit = &ten
	}
	defaultTemplate(&sp.Template)
}

// validateStatefulSet is ValidateStatefulSet, and the hub's own limits:
// no volumeClaimTemplates (no provisioner), a well-formed self-fencing
// lease.
func validateStatefulSet(s *appsv1.StatefulSet) field.ErrorList {
	errs := validateMeta(&s.ObjectMeta)
	path := field.NewPath("metadata", "name")
	// ValidateStatefulSetName: a DNS label, as its pods' hostnames are.
	for _, msg := range validation.IsDNS1123Label(s.Name) {
		if s.Name != "" {
			errs = append(errs, field.Invalid(path, s.Name, msg))
		}
	}
	spec := field.NewPath("spec")
	sp := &s.Spec
	switch sp.PodManagementPolicy {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.Invalid(spec.Child("podManagementPolicy"), sp.PodManagementPolicy, "must be 'OrderedReady' or 'Parallel'"))
	}
	up := spec.Child("updateStrategy")
	switch sp.UpdateStrategy.Type {
	case appsv1.OnDeleteStatefulSetStrategyType:
		if sp.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, field.Invalid(up.Child("rollingUpdate"), sp.UpdateStrategy.RollingUpdate, "only allowed for updateStrategy 'RollingUpdate'"))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru := sp.UpdateStrategy.RollingUpdate; ru != nil {
			errs = append(errs, validateRollingUpdateStatefulSet(ru, up.Child("rollingUpdate"))...)
		}
	default:
		errs = append(errs, field.Invalid(up, sp.UpdateStrategy, "must be 'RollingUpdate' or 'OnDelete'"))
	}
	if p := sp.PersistentVolumeClaimRetentionPolicy; p != nil {
		pp := spec.Child("persistentVolumeClaimRetentionPolicy")
		for name, v := range map[string]appsv1.PersistentVolumeClaimRetentionPolicyType{"whenDeleted": p.WhenDeleted, "whenScaled": p.WhenScaled} {
			if v != appsv1.RetainPersistentVolumeClaimRetentionPolicyType && v != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				errs = append(errs, field.NotSupported(pp.Child(name), v, []string{"Retain", "Delete"}))
			}
		}
	}
	if len(sp.VolumeClaimTemplates) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("volumeClaimTemplates"),
			"the hub has no volume provisioner: give the template the volumes its pods need and leave volumeClaimTemplates empty"))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*sp.Replicas), spec.Child("replicas"))...)
	if *sp.Replicas > MaxReplicas {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *sp.Replicas, fmt.Sprintf("must be no more than %d (the hub's limit)", MaxReplicas)))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(sp.MinReadySeconds), spec.Child("minReadySeconds"))...)
	if sp.Ordinals != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(sp.Ordinals.Start), spec.Child("ordinals.start"))...)
	}
	if sp.ServiceName != "" {
		for _, msg := range validation.IsDNS1123Label(sp.ServiceName) {
			errs = append(errs, field.Invalid(spec.Child("serviceName"), sp.ServiceName, msg))
		}
	}
	// The controller sets hostname and subdomain: the template's are not checked.
	t := sp.Template.DeepCopy()
	t.Spec.Hostname, t.Spec.Subdomain = "", ""
	errs = append(errs, validateTemplate("StatefulSet", s.Name, sp.Selector, t)...)
	errs = append(errs, validateLease(sp.Template.Annotations, spec.Child("template", "metadata", "annotations").Key(vocab.AnnotationLeaseSeconds))...)
	return append(errs, apivalidation.ValidateNonnegativeField(int64(*sp.RevisionHistoryLimit), spec.Child("revisionHistoryLimit"))...)
}

// validateRollingUpdateStatefulSet: partition ≥ 0; maxUnavailable a
// positive integer or percentage, at most 100%.
func validateRollingUpdateStatefulSet(ru *appsv1.RollingUpdateStatefulSetStrategy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ru.Partition != nil {
		errs = apivalidation.ValidateNonnegativeField(int64(*ru.Partition), path.Child("partition"))
	}
	if ru.MaxUnavailable != nil {
		mp := path.Child("maxUnavailable")
		n, percent, e := intOrPercent(ru.MaxUnavailable, mp)
		errs = append(errs, e...)
		if len(e) == 0 && n == 0 {
			errs = append(errs, field.Invalid(mp, *ru.MaxUnavailable, "cannot be 0"))
		}
		errs = append(errs, notOver100(ru.MaxUnavailable, n, percent, mp)...)
	}
	return errs
}

// validateLease checks a self-fencing lease: whole seconds, 1 to a day.
func validateLease(annotations map[string]string, path *field.Path) field.ErrorList {
	if _, err := vocab.ParseLeaseSeconds(annotations); err != nil {
		return field.ErrorList{field.Invalid(path, annotations[vocab.AnnotationLeaseSeconds],
			fmt.Sprintf("must be a whole number of seconds from 1 to %d", vocab.MaxLeaseSeconds))}
	}
	return nil
}

// ValidateStatefulSetUpdate is the API server's check of a StatefulSet
// applied over a stored one: only some of the spec may change.
func ValidateStatefulSetUpdate(s, old *appsv1.StatefulSet) field.ErrorList {
	c := s.DeepCopy()
	c.Spec.Replicas, c.Spec.Template, c.Spec.UpdateStrategy = old.Spec.Replicas, old.Spec.Template, old.Spec.UpdateStrategy
	c.Spec.MinReadySeconds, c.Spec.Ordinals, c.Spec.RevisionHistoryLimit = old.Spec.MinReadySeconds, old.Spec.Ordinals, old.Spec.RevisionHistoryLimit
	c.Spec.PersistentVolumeClaimRetentionPolicy = old.Spec.PersistentVolumeClaimRetentionPolicy
	if !equality.Semantic.DeepEqual(c.Spec, old.Spec) {
		return field.ErrorList{field.Forbidden(field.NewPath("spec"), "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")}
	}
	return nil
}
