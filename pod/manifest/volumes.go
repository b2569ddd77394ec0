package manifest

import (
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateVolumes accepts the volume sources a device can provide:
// emptyDir, hostPath, downwardAPI, and configMap, secret and projected
// (configMap, secret, downwardAPI) from the objects the device holds for
// its pods. Sources that need more of a cluster (serviceAccountToken,
// persistentVolumeClaim, …) are refused. Process pods take the same
// volumes but hostPath: their processes run on the host's file system
// and reach any host path directly (their volumes are bound at
// mountPath in a mount namespace of their own).
func validateVolumes(s *v1.PodSpec, path *field.Path, isProcess bool) (field.ErrorList, sets.Set[string]) {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, v := range s.Volumes {
		vp := path.Child("volumes").Index(i)
		if isProcess && v.HostPath != nil {
			errs = append(errs, field.Forbidden(vp.Child("hostPath"), "a process pod runs on the host's file system and reaches host paths directly: use the path itself, not a hostPath volume"))
			continue
		}
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, msg))
		}
		if names.Has(v.Name) {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
		}
		names.Insert(v.Name)
		errs = append(errs, validateVolumeSource(v.VolumeSource, vp)...)
	}
	return errs, names
}

func validateVolumeSource(vs v1.VolumeSource, vp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case vs.EmptyDir != nil:
		switch vs.EmptyDir.Medium {
		case v1.StorageMediumDefault, v1.StorageMediumMemory:
		default:
			errs = append(errs, field.NotSupported(vp.Child("emptyDir", "medium"), vs.EmptyDir.Medium, []string{"", "Memory"}))
		}
		if q := vs.EmptyDir.SizeLimit; q != nil && q.Sign() < 0 {
			errs = append(errs, field.Invalid(vp.Child("emptyDir", "sizeLimit"), q.String(), "must not be negative"))
		}
	case vs.HostPath != nil:
		if !path.IsAbs(vs.HostPath.Path) {
			errs = append(errs, field.Invalid(vp.Child("hostPath", "path"), vs.HostPath.Path, "must be an absolute path"))
		}
		if t := vs.HostPath.Type; t != nil {
			switch *t {
			case v1.HostPathUnset, v1.HostPathDirectoryOrCreate, v1.HostPathDirectory, v1.HostPathFileOrCreate,
				v1.HostPathFile, v1.HostPathSocket, v1.HostPathCharDev, v1.HostPathBlockDev:
			default:
				errs = append(errs, field.NotSupported[string](vp.Child("hostPath", "type"), string(*t), nil))
			}
		}
	case vs.DownwardAPI != nil:
		errs = append(errs, validateFileMode(vs.DownwardAPI.DefaultMode, vp.Child("downwardAPI", "defaultMode"))...)
		errs = append(errs, validateDownwardItems(vs.DownwardAPI.Items, vp.Child("downwardAPI", "items"))...)
	case vs.ConfigMap != nil:
		errs = append(errs, validateObjectVolume(vs.ConfigMap.Name, "name", vs.ConfigMap.DefaultMode, vs.ConfigMap.Items, vp.Child("configMap"))...)
	case vs.Secret != nil:
		errs = append(errs, validateObjectVolume(vs.Secret.SecretName, "secretName", vs.Secret.DefaultMode, vs.Secret.Items, vp.Child("secret"))...)
	case vs.Projected != nil:
		errs = append(errs, validateProjected(vs.Projected, vp.Child("projected"))...)
	default:
		errs = append(errs, field.Forbidden(vp, fmt.Sprintf("%s volumes are not available to static pods (no API server); use emptyDir, hostPath, downwardAPI, configMap, secret or projected", sourceKind(vs))))
	}
	return errs
}

func validateDownwardItems(items []v1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		if it.Path == "" {
			errs = append(errs, field.Required(ip.Child("path"), ""))
		}
		errs = append(errs, validateLocalNonReservedPath(it.Path, ip.Child("path"))...)
		errs = append(errs, validateFileMode(it.Mode, ip.Child("mode"))...)
		switch {
		case it.ResourceFieldRef != nil && it.FieldRef != nil:
			errs = append(errs, field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.ResourceFieldRef != nil:
			errs = append(errs, validateResourceFieldRef(it.ResourceFieldRef, ip.Child("resourceFieldRef"), true)...)
		case it.FieldRef == nil:
			errs = append(errs, field.Required(ip.Child("fieldRef"), ""))
		default:
			fp := it.FieldRef.FieldPath
			if fp != "metadata.labels" && fp != "metadata.annotations" && fp != "metadata.name" &&
				fp != "metadata.namespace" && fp != "metadata.uid" && !isLabelOrAnnotationRef(fp) {
				errs = append(errs, field.NotSupported(ip.Child("fieldRef", "fieldPath"), fp,
					[]string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"}))
			}
		}
	}
	return errs
}

// sourceKind names a volume source by its field.
func sourceKind(vs v1.VolumeSource) string {
	switch {
	case vs.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case vs.NFS != nil:
		return "nfs"
	case vs.CSI != nil:
		return "csi"
	case vs.Ephemeral != nil:
		return "ephemeral"
	case vs.Image != nil:
		return "image"
	}
	return "these"
}

// validateMounts checks a container's volume mounts against the volumes.
func validateMounts(c *v1.Container, p *field.Path, volumes sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if !path.IsAbs(m.MountPath) {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be an absolute path"))
		} else if seen.Has(path.Clean(m.MountPath)) {
			errs = append(errs, field.Duplicate(mp.Child("mountPath"), m.MountPath))
		}
		seen.Insert(path.Clean(m.MountPath))
		errs = append(errs, validateLocalDescendingPath(m.SubPath, mp.Child("subPath"))...)
		if m.SubPathExpr != "" {
			if m.SubPath != "" {
				errs = append(errs, field.Invalid(mp.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
			}
			errs = append(errs, validateLocalDescendingPath(m.SubPathExpr, mp.Child("subPathExpr"))...)
		}
	}
	return errs
}

// validateLocalDescendingPath is Kubernetes' check of a path that must
// stay inside a volume: relative, and no ".." component ("a..b" is a
// name). The daemon resolves it without links besides.
func validateLocalDescendingPath(p string, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(p) {
		errs = append(errs, field.Invalid(fp, p, "must be a relative path"))
	}
	for _, item := range strings.Split(p, "/") {
		if item == ".." {
			errs = append(errs, field.Invalid(fp, p, "must not contain '..'"))
			break
		}
	}
	return errs
}
