package containerd

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// seccompProfileDir is where Localhost seccomp profiles live under the
// data dir, as the kubelet keeps them under <root-dir>/seccomp.
const seccompProfileDir = "seccomp"

// seccompOf is a security context's seccomp profile type and, for
// Localhost, the profile's path relative to the profile directory.
func seccompOf(p *v1.SeccompProfile) (string, string) {
	if p.Type == v1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil {
		return string(p.Type), *p.LocalhostProfile
	}
	return string(p.Type), ""
}

// seccompProfilePath resolves a Localhost profile (relative to
// <data-dir>/seccomp, without "..", as Kubernetes validates it) to its
// file on the device; "" stays "".
func (r *Runtime) seccompProfilePath(rel string) (string, error) {
	if rel == "" {
		return "", nil
	}
	if filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		return "", fmt.Errorf("securityContext.seccompProfile.localhostProfile %q: must be a relative path without '..'", rel)
	}
	return filepath.Join(r.dataDir, seccompProfileDir, rel), nil
}
