// Package podsecurity decides which pods from the hub a device runs: the
// Kubernetes Pod Security Standards level the device enforces (with the
// upstream evaluator, k8s.io/pod-security-admission), whether host
// processes (process pods) may come from the hub and as which user, and
// which image sources hub pods may use. It is pure: a pod in, a verdict
// out.
package podsecurity

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	pspolicy "k8s.io/pod-security-admission/policy"

	"github.com/podvisor/podvisor/pod/manifest"
)

// Config is the device owner's choice, as written in the config file's
// hub section; the zero value is the safe default.
type Config struct {
	// Level is the Pod Security Standards level hub pods must meet:
	// privileged, baseline (default) or restricted.
	Level string
	// Version is the standards' version, "latest" (default) or "v1.N".
	Version string
	// AllowProcessPods lets the hub run process pods (host commands,
	// runtimeClassName: process) on this device.
	AllowProcessPods bool
	// AllowRootProcessPods lets those run as root.
	AllowRootProcessPods bool
	// DefaultUID is the uid a process pod runs as when it sets no
	// runAsUser: the daemon's own.
	DefaultUID int64
	// Images restricts where hub pods' images come from.
	Images ImageConfig
}

// Policy checks hub pods; make one with New.
type Policy struct {
	cfg       Config
	level     psapi.LevelVersion
	evaluator pspolicy.Evaluator
	images    imageRules
}

// ConfigError is a bad setting, named by its field in the hub section.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// New checks the configuration and builds the policy.
func New(cfg Config) (*Policy, error) {
	if cfg.Level == "" {
		cfg.Level = string(psapi.LevelBaseline)
	}
	if cfg.Version == "" {
		cfg.Version = "latest"
	}
	level, err := psapi.ParseLevel(cfg.Level)
	if err != nil {
		return nil, &ConfigError{"podSecurity", fmt.Errorf("%q: %w", cfg.Level, err)}
	}
	version, err := psapi.ParseVersion(cfg.Version)
	if err != nil {
		return nil, &ConfigError{"podSecurityVersion", fmt.Errorf("%q: %w", cfg.Version, err)}
	}
	evaluator, err := pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("pod security evaluator: %w", err)
	}
	images, err := parseImageConfig(cfg.Images)
	if err != nil {
		return nil, err
	}
	if cfg.AllowRootProcessPods && !cfg.AllowProcessPods {
		return nil, &ConfigError{"allowRootProcessPods", errors.New("needs allowProcessPods: true")}
	}
	return &Policy{cfg: cfg, level: psapi.LevelVersion{Level: level, Version: version}, evaluator: evaluator, images: images}, nil
}

// SharedImages are the local images the device owner lets hub pods use
// (ImageConfig.Shared), normalised ("vendor-tools:2" is
// docker.io/library/vendor-tools:2).
func (p *Policy) SharedImages() []string { return p.images.shared }

// Level is the level and version enforced, as in "baseline:latest".
func (p *Policy) Level() string { return p.level.String() }

// Check returns why the hub may not run the pod on this device, naming
// each rule and field broken, or nil.
func (p *Policy) Check(pod *v1.Pod) error {
	var reasons []string
	isProcess := pod.Spec.RuntimeClassName != nil && *pod.Spec.RuntimeClassName == manifest.ProcessRuntimeClass
	if isProcess {
		if !p.cfg.AllowProcessPods {
			return fmt.Errorf("pod %q: spec.runtimeClassName: process pods (host commands) from the hub are not allowed on this device (hub.allowProcessPods)", pod.Name)
		}
		reasons = append(reasons, p.rootProcess(pod)...)
	}
	// The apiserver's words, so the verdict reads like a refusal by a
	// Kubernetes namespace's enforce label.
	result := pspolicy.AggregateCheckResults(p.evaluator.EvaluatePod(p.level, &pod.ObjectMeta, &pod.Spec))
	if !result.Allowed {
		reasons = append(reasons, fmt.Sprintf("violates PodSecurity %q: %s (hub.podSecurity)", p.level.String(), result.ForbiddenDetail()))
	}
	if !isProcess {
		reasons = append(reasons, p.images.check(pod)...)
	}
	if len(reasons) == 0 {
		return nil
	}
	msg := fmt.Sprintf("pod %q: %s", pod.Name, strings.Join(reasons, "; "))
	if len(msg) > maxReason {
		// A pod of many bad containers must not make the ack huge.
		msg = strings.ToValidUTF8(msg[:maxReason], "") + "…"
	}
	return errors.New(msg)
}

// maxReason bounds a refusal's text, which travels in the ack.
const maxReason = 4096

// rootProcess names each container of a process pod that would run as
// root (uid or gid 0): on the host, with no namespace around it, that is
// the host's root. Allowed root still does not pass a container that
// says runAsNonRoot: the process runtime has no image to check it
// against, so the level's runAsNonRoot would be a promise nobody keeps.
func (p *Policy) rootProcess(pod *v1.Pod) []string {
	var reasons []string
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	for _, list := range []struct {
		field      string
		containers []v1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range list.containers {
			uid, uidField := psc.RunAsUser, "spec.securityContext.runAsUser"
			gid, gidField := psc.RunAsGroup, "spec.securityContext.runAsGroup"
			if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
				uid, uidField = sc.RunAsUser, fmt.Sprintf("spec.%s[%d].securityContext.runAsUser", list.field, i)
			}
			if sc := c.SecurityContext; sc != nil && sc.RunAsGroup != nil {
				gid, gidField = sc.RunAsGroup, fmt.Sprintf("spec.%s[%d].securityContext.runAsGroup", list.field, i)
			}
			nonRoot := psc.RunAsNonRoot
			if sc := c.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			asRoot := (uid == nil && p.cfg.DefaultUID == 0) || (uid != nil && *uid == 0)
			switch {
			case asRoot && nonRoot != nil && *nonRoot:
				reasons = append(reasons, fmt.Sprintf("%s: process container %q sets runAsNonRoot but would run as root", uidField, c.Name))
			case p.cfg.AllowRootProcessPods:
			case uid == nil && p.cfg.DefaultUID == 0:
				reasons = append(reasons, fmt.Sprintf("%s: unset, so process container %q would run as root (set a non-zero uid, or allow root with hub.allowRootProcessPods)", uidField, c.Name))
			case uid != nil && *uid == 0:
				reasons = append(reasons, fmt.Sprintf("%s: 0 runs process container %q as root (set a non-zero uid, or allow root with hub.allowRootProcessPods)", uidField, c.Name))
			case gid != nil && *gid == 0:
				reasons = append(reasons, fmt.Sprintf("%s: 0 runs process container %q in the root group (set a non-zero gid, or allow root with hub.allowRootProcessPods)", gidField, c.Name))
			}
		}
	}
	return reasons
}
