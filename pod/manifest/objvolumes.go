package manifest

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// fileModeErrorMsg is the API server's word for a mode out of range.
const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

// validateObjectVolume is the API server's check of a configMap or secret
// volume: the object's name (nameField: "name" or "secretName"), its
// defaultMode and items.
func validateObjectVolume(name, nameField string, defaultMode *int32, items []v1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(p.Child(nameField), ""))
	}
	errs = append(errs, validateFileMode(defaultMode, p.Child("defaultMode"))...)
	for i, kp := range items {
		errs = append(errs, validateKeyToPath(kp, p.Child("items").Index(i))...)
	}
	return errs
}

// validateProjected is the API server's validateProjectedVolumeSource
// for the sources a device can project: configMap, secret and
// downwardAPI. A path may be projected once across all sources.
func validateProjected(pv *v1.ProjectedVolumeSource, p *field.Path) field.ErrorList {
	errs := validateFileMode(pv.DefaultMode, p.Child("defaultMode"))
	paths := sets.New[string]()
	// A second source writing a path is named by its object's name (the
	// API server's choice), a downwardAPI item by the path.
	claim := func(path, value string) {
		if path == "" {
			return
		}
		if paths.Has(path) {
			errs = append(errs, field.Invalid(p, value, "conflicting duplicate paths"))
		}
		paths.Insert(path)
	}
	for i, src := range pv.Sources {
		sp := p.Child("sources").Index(i)
		n := 0
		if src.Secret != nil {
			n++
			if src.Secret.Name == "" {
				errs = append(errs, field.Required(sp.Child("secret", "name"), ""))
			}
			for j, kp := range src.Secret.Items {
				errs = append(errs, validateKeyToPath(kp, sp.Child("secret", "items").Index(j))...)
				claim(kp.Path, src.Secret.Name)
			}
		}
		if src.ConfigMap != nil {
			n++
			if src.ConfigMap.Name == "" {
				errs = append(errs, field.Required(sp.Child("configMap", "name"), ""))
			}
			for j, kp := range src.ConfigMap.Items {
				errs = append(errs, validateKeyToPath(kp, sp.Child("configMap", "items").Index(j))...)
				claim(kp.Path, src.ConfigMap.Name)
			}
		}
		if src.DownwardAPI != nil {
			n++
			errs = append(errs, validateDownwardItems(src.DownwardAPI.Items, sp.Child("downwardAPI", "items"))...)
			for _, it := range src.DownwardAPI.Items {
				claim(it.Path, it.Path)
			}
		}
		if src.ServiceAccountToken != nil {
			n++
			errs = append(errs, field.Forbidden(sp.Child("serviceAccountToken"),
				"a device has no API server to issue service account tokens; project configMap, secret or downwardAPI"))
		}
		if src.ClusterTrustBundle != nil {
			n++
			errs = append(errs, field.Forbidden(sp.Child("clusterTrustBundle"),
				"a device receives no ClusterTrustBundles; project configMap, secret or downwardAPI"))
		}
		if n > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type"))
		}
	}
	return errs
}

// validateKeyToPath is the API server's check of an item of a configMap
// or secret volume or projection.
func validateKeyToPath(kp v1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if kp.Key == "" {
		errs = append(errs, field.Required(p.Child("key"), ""))
	}
	if kp.Path == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, validateLocalNonReservedPath(kp.Path, p.Child("path"))...)
	return append(errs, validateFileMode(kp.Mode, p.Child("mode"))...)
}

// validateFileMode is the API server's range check of a mode or
// defaultMode.
func validateFileMode(mode *int32, p *field.Path) field.ErrorList {
	if mode != nil && (*mode > 0o777 || *mode < 0) {
		return field.ErrorList{field.Invalid(p, *mode, fileModeErrorMsg)}
	}
	return nil
}

// validateLocalNonReservedPath is the API server's check of a path a
// volume writes: a descending path that does not start with "..", which
// the kubelet's atomic writer keeps for its own (..data).
func validateLocalNonReservedPath(p string, fp *field.Path) field.ErrorList {
	errs := validateLocalDescendingPath(p, fp)
	// Not said twice when ".." was caught already.
	if strings.HasPrefix(p, "..") && !strings.HasPrefix(p, "../") {
		errs = append(errs, field.Invalid(fp, p, "must not start with '..'"))
	}
	return errs
}
