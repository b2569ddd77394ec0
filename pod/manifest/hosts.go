package manifest

import (
	"path"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateHostNames checks what goes into a pod's hostname and hosts
// file as the API server does: a hostname and subdomain are DNS labels;
// hostAliases have an IP address and DNS subdomain names (nothing that
// could add lines to the file).
func validateHostNames(s *v1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, v := range map[string]string{"hostname": s.Hostname, "subdomain": s.Subdomain} {
		if v == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Label(v) {
			errs = append(errs, field.Invalid(p.Child(name), v, msg))
		}
	}
	for i, a := range s.HostAliases {
		ap := p.Child("hostAliases").Index(i)
		errs = append(errs, validation.IsValidIP(ap.Child("ip"), a.IP)...)
		for j, h := range a.Hostnames {
			for _, msg := range validation.IsDNS1123Subdomain(h) {
				errs = append(errs, field.Invalid(ap.Child("hostnames").Index(j), h, msg))
			}
		}
	}
	return errs
}

// validateTerminationMessage checks a container's termination message
// settings: the API server's policies, and an absolute path (a file is
// bound there).
func validateTerminationMessage(c *v1.Container, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch c.TerminationMessagePolicy {
	case v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError:
	default:
		errs = append(errs, field.NotSupported(p.Child("terminationMessagePolicy"), c.TerminationMessagePolicy,
			[]string{string(v1.TerminationMessageReadFile), string(v1.TerminationMessageFallbackToLogsOnError)}))
	}
	if m := c.TerminationMessagePath; m != "" && (!path.IsAbs(m) || path.Clean(m) != m || m == "/") {
		errs = append(errs, field.Invalid(p.Child("terminationMessagePath"), m, "must be a clean absolute file path"))
	}
	return errs
}
