package manifest

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/pod/lease"
)

// supportedFieldPaths are the downward-API fields a device can fill in.
var supportedFieldPaths = sets.New(
	"metadata.name", "metadata.namespace", "metadata.uid",
	"spec.nodeName", "spec.serviceAccountName",
	"status.hostIP", "status.podIP", "status.hostIPs", "status.podIPs",
)

// Validate checks a defaulted pod the way the API server would for the
// fields podvisor uses, and rejects what a device cannot honour.
func Validate(p *v1.Pod) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if p.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), ""))
	}
	for _, msg := range validation.IsDNS1123Subdomain(p.Name) {
		if p.Name != "" {
			errs = append(errs, field.Invalid(meta.Child("name"), p.Name, msg))
		}
	}
	for _, msg := range validation.IsDNS1123Label(p.Namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), p.Namespace, msg))
	}
	errs = append(errs, metavalidation.ValidateLabels(p.Labels, meta.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(p.Annotations, meta.Child("annotations"))...)
	if _, _, err := lease.Of(p); err != nil {
		errs = append(errs, field.Invalid(meta.Child("annotations").Key(lease.Annotation), p.Annotations[lease.Annotation], err.Error()))
	}
	errs = append(errs, validateSpec(&p.Spec, field.NewPath("spec"))...)
	return errs
}

func validateSpec(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), "a pod needs at least one container"))
	}
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace && s.HostPID {
		errs = append(errs, field.Invalid(path.Child("shareProcessNamespace"), true, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	if len(s.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(path.Child("ephemeralContainers"), "static pods cannot have ephemeral containers"))
	}
	switch s.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), s.RestartPolicy,
			[]string{string(v1.RestartPolicyAlways), string(v1.RestartPolicyOnFailure), string(v1.RestartPolicyNever)}))
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g, "must be >= 0"))
	}
	if d := s.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *d, "must be > 0"))
	}
	if rc := s.RuntimeClassName; rc != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*rc) {
			errs = append(errs, field.Invalid(path.Child("runtimeClassName"), *rc, msg))
		}
	}
	errs = append(errs, validateHostNames(s, path)...)
	if sc := s.SecurityContext; sc != nil {
		errs = append(errs, validateIDs(sc.RunAsUser, sc.RunAsGroup, path.Child("securityContext"))...)
		errs = append(errs, validateSeccompProfile(sc.SeccompProfile, path.Child("securityContext", "seccompProfile"))...)
	}
	isProcess := s.RuntimeClassName != nil && *s.RuntimeClassName == ProcessRuntimeClass
	volErrs, volumes := validateVolumes(s, path, isProcess)
	errs = append(errs, volErrs...)
	names := sets.New[string]()
	for i := range s.InitContainers {
		c := &s.InitContainers[i]
		p := path.Child("initContainers").Index(i)
		errs = append(errs, validateContainer(c, p, names, isProcess)...)
		errs = append(errs, validateMounts(c, p, volumes)...)
		errs = append(errs, validateInitContainer(c, p)...)
	}
	for i := range s.Containers {
		c := &s.Containers[i]
		p := path.Child("containers").Index(i)
		errs = append(errs, validateContainer(c, p, names, isProcess)...)
		errs = append(errs, validateMounts(c, p, volumes)...)
		if c.RestartPolicy != nil {
			errs = append(errs, field.Forbidden(p.Child("restartPolicy"), "per-container restart policies are only for init containers (sidecars)"))
		}
	}
	for i, g := range s.ReadinessGates {
		for _, msg := range validation.IsQualifiedName(string(g.ConditionType)) {
			errs = append(errs, field.Invalid(path.Child("readinessGates").Index(i).Child("conditionType"), g.ConditionType, msg))
		}
	}
	return errs
}

// validateInitContainer applies the rules for init containers: a regular
// one runs to completion, so it may have no probes and no lifecycle hooks;
// a sidecar (restartPolicy Always) may have both.
func validateInitContainer(c *v1.Container, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.RestartPolicy != nil {
		if *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
			errs = append(errs, field.NotSupported(path.Child("restartPolicy"), *c.RestartPolicy, []string{"Always"}))
		}
		return errs
	}
	for name, set := range map[string]bool{
		"readinessProbe": c.ReadinessProbe != nil, "livenessProbe": c.LivenessProbe != nil,
		"startupProbe": c.StartupProbe != nil, "lifecycle": c.Lifecycle != nil,
	} {
		if set {
			errs = append(errs, field.Forbidden(path.Child(name), "may not be set for init containers without restartPolicy=Always"))
		}
	}
	return errs
}

func validateContainer(c *v1.Container, path *field.Path, names sets.Set[string], isProcess bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.Name == "":
		errs = append(errs, field.Required(path.Child("name"), ""))
	case names.Has(c.Name):
		errs = append(errs, field.Duplicate(path.Child("name"), c.Name))
	default:
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), c.Name, msg))
		}
	}
	names.Insert(c.Name)
	errs = append(errs, validateTerminationMessage(c, path)...)
	if strings.TrimSpace(c.Image) == "" {
		errs = append(errs, field.Required(path.Child("image"), `write "host" for runtimeClassName: process`))
	}
	if isProcess && len(c.Command) == 0 {
		errs = append(errs, field.Required(path.Child("command"), "a process container has no image entrypoint: give the command to run"))
	}
	ports := sets.New[string]()
	for i, port := range c.Ports {
		pp := path.Child("ports").Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if ports.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			ports.Insert(port.Name)
		}
		switch port.Protocol {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
	}
	for i, e := range c.Env {
		errs = append(errs, validateEnv(e, path.Child("env").Index(i))...)
	}
	errs = append(errs, validateEnvFrom(c.EnvFrom, path.Child("envFrom"))...)
	errs = append(errs, validateResources(c.Resources, path.Child("resources"))...)
	if sc := c.SecurityContext; sc != nil {
		errs = append(errs, validateIDs(sc.RunAsUser, sc.RunAsGroup, path.Child("securityContext"))...)
		errs = append(errs, validateSeccompProfile(sc.SeccompProfile, path.Child("securityContext", "seccompProfile"))...)
	}
	errs = append(errs, validateLifecycle(c.Lifecycle, path.Child("lifecycle"), ports)...)
	errs = append(errs, validateProbe(c.LivenessProbe, path.Child("livenessProbe"), true, ports)...)
	errs = append(errs, validateProbe(c.ReadinessProbe, path.Child("readinessProbe"), false, ports)...)
	errs = append(errs, validateProbe(c.StartupProbe, path.Child("startupProbe"), true, ports)...)
	return errs
}

func validateEnv(e v1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	// RelaxedEnvironmentVariableValidation is GA: any printable ASCII
	// but '='.
	for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
		errs = append(errs, field.Invalid(path.Child("name"), e.Name, msg))
	}
	f := e.ValueFrom
	if f == nil {
		return errs
	}
	vf := path.Child("valueFrom")
	if e.Value != "" {
		errs = append(errs, field.Invalid(vf, "", "may not be specified when `value` is not empty"))
	}
	switch {
	case f.FieldRef != nil:
		fp := f.FieldRef.FieldPath
		if !supportedFieldPaths.Has(fp) && !isLabelOrAnnotationRef(fp) {
			errs = append(errs, field.NotSupported(vf.Child("fieldRef", "fieldPath"), fp,
				append(sets.List(supportedFieldPaths), "metadata.labels['<KEY>']", "metadata.annotations['<KEY>']")))
		}
		if f.FieldRef.APIVersion != "v1" {
			errs = append(errs, field.NotSupported(vf.Child("fieldRef", "apiVersion"), f.FieldRef.APIVersion, []string{"v1"}))
		}
	case f.ResourceFieldRef != nil:
		errs = append(errs, validateResourceFieldRef(f.ResourceFieldRef, vf.Child("resourceFieldRef"), false)...)
	case f.ConfigMapKeyRef != nil:
		errs = append(errs, validateKeySelector(f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key, vf.Child("configMapKeyRef"))...)
	case f.SecretKeyRef != nil:
		errs = append(errs, validateKeySelector(f.SecretKeyRef.Name, f.SecretKeyRef.Key, vf.Child("secretKeyRef"))...)
	case f.FileKeyRef != nil:
		errs = append(errs, field.Forbidden(vf.Child("fileKeyRef"), "is not available on a device (the EnvFiles feature is alpha)"))
	default:
		errs = append(errs, field.Required(vf, "one source must be given"))
	}
	return errs
}

func isLabelOrAnnotationRef(fp string) bool {
	for _, prefix := range []string{"metadata.labels['", "metadata.annotations['"} {
		if strings.HasPrefix(fp, prefix) && strings.HasSuffix(fp, "']") && len(fp) > len(prefix)+2 {
			return true
		}
	}
	return false
}

func validateResources(r v1.ResourceRequirements, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, section := range []struct {
		name string
		list v1.ResourceList
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for name, q := range section.list {
			p := path.Child(section.name).Key(string(name))
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(p, q.String(), "must be greater than or equal to 0"))
			}
			if !validResourceName(name) {
				errs = append(errs, field.Invalid(p, name, "must be cpu, memory, ephemeral-storage, hugepages-<size>, or a domain-prefixed extended resource"))
			}
		}
	}
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func validResourceName(n v1.ResourceName) bool {
	switch {
	case n == v1.ResourceCPU, n == v1.ResourceMemory, n == v1.ResourceEphemeralStorage:
		return true
	case strings.HasPrefix(string(n), v1.ResourceHugePagesPrefix):
		return true
	}
	return strings.Contains(string(n), "/") && len(validation.IsQualifiedName(string(n))) == 0
}

func validateIDs(user, group *int64, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if user != nil {
		for _, msg := range validation.IsValidUserID(*user) {
			errs = append(errs, field.Invalid(path.Child("runAsUser"), *user, msg))
		}
	}
	if group != nil {
		for _, msg := range validation.IsValidGroupID(*group) {
			errs = append(errs, field.Invalid(path.Child("runAsGroup"), *group, msg))
		}
	}
	return errs
}

// stopSignals are the signals a stop may send.
var stopSignals = sets.New("SIGABRT", "SIGALRM", "SIGHUP", "SIGINT", "SIGKILL", "SIGPWR", "SIGQUIT",
	"SIGTERM", "SIGUSR1", "SIGUSR2", "SIGWINCH")

func validateLifecycle(lc *v1.Lifecycle, path *field.Path, ports sets.Set[string]) field.ErrorList {
	if lc == nil {
		return nil
	}
	var errs field.ErrorList
	for name, h := range map[string]*v1.LifecycleHandler{"postStart": lc.PostStart, "preStop": lc.PreStop} {
		if h == nil {
			continue
		}
		hp := path.Child(name)
		n := 0
		if h.Exec != nil {
			n++
			if len(h.Exec.Command) == 0 {
				errs = append(errs, field.Required(hp.Child("exec", "command"), ""))
			}
		}
		if h.HTTPGet != nil {
			n++
			errs = append(errs, validatePort(h.HTTPGet.Port, ports, hp.Child("httpGet", "port"))...)
		}
		if h.Sleep != nil {
			n++
			if h.Sleep.Seconds < 0 {
				errs = append(errs, field.Invalid(hp.Child("sleep", "seconds"), h.Sleep.Seconds, "must be >= 0"))
			}
		}
		if h.TCPSocket != nil {
			errs = append(errs, field.Forbidden(hp.Child("tcpSocket"), "tcpSocket is deprecated and not supported as a lifecycle handler"))
		}
		if n != 1 {
			errs = append(errs, field.Invalid(hp, n, "must specify exactly one handler: exec, httpGet or sleep"))
		}
	}
	if s := lc.StopSignal; s != nil && !stopSignals.Has(string(*s)) {
		errs = append(errs, field.NotSupported(path.Child("stopSignal"), *s, sets.List(stopSignals)))
	}
	return errs
}

func validateProbe(p *v1.Probe, path *field.Path, mustSucceedOnce bool, ports sets.Set[string]) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	handlers := 0
	if p.Exec != nil {
		handlers++
		if len(p.Exec.Command) == 0 {
			errs = append(errs, field.Required(path.Child("exec", "command"), ""))
		}
	}
	if p.HTTPGet != nil {
		handlers++
		errs = append(errs, validatePort(p.HTTPGet.Port, ports, path.Child("httpGet", "port"))...)
		if s := p.HTTPGet.Scheme; s != v1.URISchemeHTTP && s != v1.URISchemeHTTPS {
			errs = append(errs, field.NotSupported(path.Child("httpGet", "scheme"), s, []string{"HTTP", "HTTPS"}))
		}
	}
	if p.TCPSocket != nil {
		handlers++
		errs = append(errs, validatePort(p.TCPSocket.Port, ports, path.Child("tcpSocket", "port"))...)
	}
	if p.GRPC != nil {
		handlers++
		for _, msg := range validation.IsValidPortNum(int(p.GRPC.Port)) {
			errs = append(errs, field.Invalid(path.Child("grpc", "port"), p.GRPC.Port, msg))
		}
	}
	if handlers != 1 {
		errs = append(errs, field.Invalid(path, handlers, "must specify exactly one handler: exec, httpGet, tcpSocket or grpc"))
	}
	for _, f := range []struct {
		name string
		v    int32
		min  int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds, 0}, {"timeoutSeconds", p.TimeoutSeconds, 1},
		{"periodSeconds", p.PeriodSeconds, 1}, {"successThreshold", p.SuccessThreshold, 1},
		{"failureThreshold", p.FailureThreshold, 1}} {
		if f.v < f.min {
			errs = append(errs, field.Invalid(path.Child(f.name), f.v, fmt.Sprintf("must be >= %d", f.min)))
		}
	}
	if mustSucceedOnce && p.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(path.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && (*g <= 0 || !mustSucceedOnce) {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g,
			"must be > 0, and is allowed only for liveness and startup probes"))
	}
	return errs
}

func validatePort(port intstr.IntOrString, named sets.Set[string], path *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		if !named.Has(port.StrVal) {
			return field.ErrorList{field.Invalid(path, port.StrVal, "must be a number or the name of a port of this container")}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(int(port.IntVal)) {
		errs = append(errs, field.Invalid(path, port.IntVal, msg))
	}
	return errs
}
