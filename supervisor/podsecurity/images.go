package podsecurity

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
)

// ImageConfig restricts the images hub pods may run; empty allows any.
type ImageConfig struct {
	// Registries are the registries, each optionally with a repository
	// path prefix (ghcr.io/acme, docker.io/library), that hub pods'
	// images must come from.
	Registries []string
	// RequireDigest refuses images not pinned by digest (name@sha256:…),
	// so a name cannot stand for another image than the hub means.
	RequireDigest bool
	// Shared are the device's local images (side-loaded, or of unknown
	// origin) that hub pods may use: image references, a repository
	// alone for each of its tags. Hub pods use only images pulled from a
	// registry otherwise.
	Shared []string
}

// registryPrefix is one allowed registry, normalised as image names are.
type registryPrefix struct {
	domain string
	path   string // "" for the whole registry
}

type imageRules struct {
	registries    []registryPrefix
	written       string // the registries as configured, for messages
	requireDigest bool
	shared        []string // normalised
}

// maxRegistries bounds the list a config may give.
const maxRegistries = 256

func parseImageConfig(c ImageConfig) (imageRules, error) {
	if len(c.Registries) > maxRegistries {
		return imageRules{}, &ConfigError{"images.registries", fmt.Errorf("%d entries, at most %d", len(c.Registries), maxRegistries)}
	}
	r := imageRules{requireDigest: c.RequireDigest, written: strings.Join(c.Registries, ", ")}
	for i, entry := range c.Registries {
		p, err := parseRegistry(entry)
		if err != nil {
			return imageRules{}, &ConfigError{fmt.Sprintf("images.registries[%d]", i), err}
		}
		r.registries = append(r.registries, p)
	}
	if len(c.Shared) > maxRegistries {
		return imageRules{}, &ConfigError{"images.shared", fmt.Errorf("%d entries, at most %d", len(c.Shared), maxRegistries)}
	}
	for i, entry := range c.Shared {
		named, err := reference.ParseNormalizedNamed(strings.TrimSpace(entry))
		if err != nil {
			return imageRules{}, &ConfigError{fmt.Sprintf("images.shared[%d]", i), fmt.Errorf("%q: %w", entry, err)}
		}
		r.shared = append(r.shared, named.String())
	}
	return r, nil
}

// parseRegistry reads "host[:port][/path]". The host must look like one
// (a dot, a port or localhost), as reference decides when it splits a
// name: "busybox" alone is a Docker Hub repository, not a registry. The
// host is normalised as image names are (index.docker.io is docker.io);
// the path is a prefix of repository paths as written, so Docker Hub's
// official images are docker.io/library.
func parseRegistry(entry string) (registryPrefix, error) {
	entry = strings.TrimSuffix(strings.TrimSpace(entry), "/")
	host, path, _ := strings.Cut(entry, "/")
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return registryPrefix{}, fmt.Errorf("%q: want a registry host, optionally with a path (docker.io, ghcr.io/acme, registry.local:5000)", entry)
	}
	// The reference grammar decides, on an image named below the entry.
	named, err := reference.ParseNormalizedNamed(entry + "/x")
	if err != nil {
		return registryPrefix{}, fmt.Errorf("%q: %w", entry, err)
	}
	return registryPrefix{domain: reference.Domain(named), path: path}, nil
}

func (p registryPrefix) matches(named reference.Named) bool {
	if reference.Domain(named) != p.domain {
		return false
	}
	path := reference.Path(named)
	return p.path == "" || path == p.path || strings.HasPrefix(path, p.path+"/")
}

// check names each container whose image breaks the rules.
func (r imageRules) check(pod *v1.Pod) []string {
	if len(r.registries) == 0 && !r.requireDigest {
		return nil
	}
	var reasons []string
	for _, list := range []struct {
		field      string
		containers []v1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range list.containers {
			field := fmt.Sprintf("spec.%s[%d].image", list.field, i)
			named, err := reference.ParseNormalizedNamed(c.Image)
			if err != nil {
				reasons = append(reasons, fmt.Sprintf("%s: %q: %v", field, c.Image, err))
				continue
			}
			if len(r.registries) > 0 && !r.allowedRegistry(named) {
				reasons = append(reasons, fmt.Sprintf("%s: %q is not from a registry this device allows hub pods (hub.images.registries: %s)",
					field, c.Image, r.written))
			}
			if _, pinned := named.(reference.Digested); r.requireDigest && !pinned {
				reasons = append(reasons, fmt.Sprintf("%s: %q is not pinned by digest (hub.images.requireDigest)", field, c.Image))
			}
		}
	}
	return reasons
}

func (r imageRules) allowedRegistry(named reference.Named) bool {
	for _, p := range r.registries {
		if p.matches(named) {
			return true
		}
	}
	return false
}
