package podfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// defaultFileMode is the API server's default defaultMode of configMap,
// secret, downwardAPI and projected volumes.
const defaultFileMode int32 = 0o644

// atomicVolume reports whether a volume is written by the atomic writer:
// configMap, secret, downwardAPI and projected, as the kubelet writes them.
func atomicVolume(v v1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

// writeAtomicVolume computes a volume's files and projects them into dir,
// a tmpfs of its own (the kubelet keeps secrets off disk; here no object
// reaches flash), sized to them; it reports whether the files changed.
// An object or key the volume needs that is missing, or any other
// failure, is a *runtime.MountError: the kubelet's FailedMount.
func writeAtomicVolume(dir string, pod *v1.Pod, v v1.Volume, node runtime.PodEnv) (bool, error) {
	payload, err := volumePayload(pod, v, node)
	if err == nil {
		err = mountObjectTmpfs(dir, tmpfsSize(payload))
	}
	var changed bool
	if err == nil {
		var fsGroup *int64
		if sc := pod.Spec.SecurityContext; sc != nil {
			fsGroup = sc.FSGroup
		}
		changed, err = atomicWrite(dir, payload, func(string) error { return setVolumeOwnership(dir, fsGroup) })
	}
	if err != nil {
		return changed, &runtime.MountError{Volume: v.Name, Err: err}
	}
	return changed, nil
}

// hasData reports whether the object volume at dir was written before.
func hasData(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, dataDirName))
	return err == nil && isMountPoint(dir)
}

// volumePayload is what the kubelet's volume plugin would write for v.
func volumePayload(pod *v1.Pod, v v1.Volume, node runtime.PodEnv) (map[string]fileProjection, error) {
	switch {
	case v.ConfigMap != nil:
		s := v.ConfigMap
		return objectPayload(node.Objects, objects.Ref{Kind: objects.ConfigMap, Namespace: pod.Namespace, Name: s.Name},
			s.Items, modeOr(s.DefaultMode), isTrue(s.Optional))
	case v.Secret != nil:
		s := v.Secret
		return objectPayload(node.Objects, objects.Ref{Kind: objects.Secret, Namespace: pod.Namespace, Name: s.SecretName},
			s.Items, modeOr(s.DefaultMode), isTrue(s.Optional))
	case v.DownwardAPI != nil:
		out := map[string]fileProjection{}
		err := downwardPayload(out, pod, v.DownwardAPI.Items, modeOr(v.DownwardAPI.DefaultMode), node)
		return out, err
	case v.Projected != nil:
		return projectedPayload(pod, v.Projected, node)
	}
	return nil, errors.New("not a configMap, secret, downwardAPI or projected volume")
}

// projectedPayload combines the sources of a projected volume as the
// kubelet's projected plugin does: each source's files in turn (a later
// one wins a path, which validation forbids anyway); a source that fails
// is skipped and its error joined to the others'.
func projectedPayload(pod *v1.Pod, p *v1.ProjectedVolumeSource, node runtime.PodEnv) (map[string]fileProjection, error) {
	mode := modeOr(p.DefaultMode)
	out := map[string]fileProjection{}
	var errs []error
	merge := func(payload map[string]fileProjection, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, fp := range payload {
			out[k] = fp
		}
	}
	for _, s := range p.Sources {
		switch {
		case s.ConfigMap != nil:
			merge(objectPayload(node.Objects, objects.Ref{Kind: objects.ConfigMap, Namespace: pod.Namespace, Name: s.ConfigMap.Name},
				s.ConfigMap.Items, mode, isTrue(s.ConfigMap.Optional)))
		case s.Secret != nil:
			merge(objectPayload(node.Objects, objects.Ref{Kind: objects.Secret, Namespace: pod.Namespace, Name: s.Secret.Name},
				s.Secret.Items, mode, isTrue(s.Secret.Optional)))
		case s.DownwardAPI != nil:
			d := map[string]fileProjection{}
			merge(d, downwardPayload(d, pod, s.DownwardAPI.Items, mode, node))
		}
	}
	return out, aggregate(settled(errs))
}

// settled are the errors that are the kubelet's, without those of the
// objects still pending; only pending errors: the first of them, so the
// volume waits for it (errors.Is(err, objects.ErrPending)).
func settled(errs []error) []error {
	var out []error
	for _, e := range errs {
		if !errors.Is(e, objects.ErrPending) {
			out = append(out, e)
		}
	}
	if len(out) == 0 && len(errs) > 0 {
		return errs[:1]
	}
	return out
}

// objectPayload is the kubelet's MakePayload of a configMap or secret
// volume (or projection): every key at its own name with defaultMode, or
// the items asked for at their paths with their modes. A missing object
// that is optional is empty; one that is not is an error, the Getter's
// (`configmap "app" not found`). An item whose key is missing is skipped
// if the object is optional, else the kubelet's error.
func objectPayload(get objects.Getter, ref objects.Ref, items []v1.KeyToPath, defaultMode int32, optional bool) (map[string]fileProjection, error) {
	var data map[string][]byte
	obj, err := getObject(get, ref)
	switch {
	case err == nil:
		data = obj.Data
	case !errors.Is(err, objects.ErrNotFound) || !optional:
		return nil, err
	}
	out := make(map[string]fileProjection, len(data))
	if len(items) == 0 {
		for k, v := range data {
			out[k] = fileProjection{Data: v, Mode: defaultMode}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			if ref.Kind == objects.ConfigMap {
				return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
			}
			return nil, fmt.Errorf("references non-existent secret key: %s", it.Key)
		}
		out[it.Path] = fileProjection{Data: v, Mode: modeOr2(it.Mode, defaultMode)}
	}
	return out, nil
}

// getObject asks the pod's Getter; without one, nothing is found.
func getObject(get objects.Getter, ref objects.Ref) (*objects.Object, error) {
	if get == nil {
		return nil, &objects.NotFoundError{Ref: ref}
	}
	return get.Get(ref)
}

// downwardPayload adds the downward API items to out, as the kubelet's
// CollectData: an item that cannot be resolved is an error, the others
// are written all the same.
func downwardPayload(out map[string]fileProjection, pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode int32, node runtime.PodEnv) error {
	var errs []error
	for _, it := range items {
		val, err := downwardValue(it, pod, node)
		if err != nil {
			errs = append(errs, err)
		}
		out[filepath.Clean(it.Path)] = fileProjection{Data: []byte(val), Mode: modeOr2(it.Mode, defaultMode)}
	}
	return aggregate(errs)
}

// aggregate is apimachinery's NewAggregate as an error message: one error
// as it is, several as "[a, b]", each message once.
func aggregate(errs []error) error {
	var msgs []string
	seen := map[string]bool{}
	for _, e := range errs {
		if m := e.Error(); !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.New("[" + strings.Join(msgs, ", ") + "]")
}

func modeOr(m *int32) int32 { return modeOr2(m, defaultFileMode) }

func modeOr2(m *int32, def int32) int32 {
	if m != nil {
		return *m
	}
	return def
}

func isTrue(b *bool) bool { return b != nil && *b }

// Sizing of an object volume's tmpfs: room for three copies of the
// payload (the writer keeps one generation back, and writes the next one
// before it removes it), counted in pages as tmpfs charges them, plus
// headroom for directories and links.
const (
	tmpfsPage     = 4096
	tmpfsHeadroom = 64 << 10
)

// tmpfsSize is the size an object volume's tmpfs needs for payload. A
// link whose target is too long to live in its inode takes a page too
// (shmem keeps targets shorter than 128 bytes inline).
func tmpfsSize(payload map[string]fileProjection) int64 {
	var pages, links int64
	seen := map[string]bool{}
	for p, fp := range payload {
		pages += (int64(len(fp.Data)) + tmpfsPage - 1) / tmpfsPage
		if name, _, _ := strings.Cut(p, "/"); !seen[name] {
			seen[name] = true
			if len(dataDirName)+1+len(name) >= 128 {
				links++
			}
		}
	}
	return (3*pages+links)*tmpfsPage + tmpfsHeadroom
}

// mountObjectTmpfs mounts a tmpfs of size bytes at dir, or grows the one
// there to it: only the daemon writes it (containers mount it read-only).
func mountObjectTmpfs(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	if !isMountPoint(dir) {
		if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=0755,size="+strconv.FormatInt(size, 10)); err != nil {
			return fmt.Errorf("mounting tmpfs: %w", err)
		}
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if int64(st.Blocks)*int64(st.Bsize) >= size { // Bsize is int32 on 32-bit ARM
		return nil
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags|unix.MS_REMOUNT, "size="+strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("growing tmpfs: %w", err)
	}
	return nil
}

// RefreshObjectVolumes rewrites the configMap, secret, downwardAPI and
// projected volumes of a pod already set up on the device from what
// node.Objects holds now, with the atomic swap, and reports whether any
// file changed. It is idempotent and cheap when nothing changed (the
// payload is compared with the files). A volume whose object is missing
// (not optional) keeps its files and is reported in the error, a
// *runtime.MountError per volume, as the kubelet reports FailedMount for
// a running pod; one whose object is pending (its new version on its
// way) keeps its files quietly: its arrival refreshes it. Mounts with a
// subPath keep what they were given.
func (f *FS) RefreshObjectVolumes(pod *v1.Pod, node runtime.PodEnv) (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	names := make([]string, 0, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		if !atomicVolume(v) {
			continue
		}
		dir := filepath.Join(f.podDir(pod.UID), "volumes", v.Name)
		if !isMountPoint(dir) {
			continue // not set up yet: the next start writes it
		}
		c, err := writeAtomicVolume(dir, pod, v, node)
		if err != nil && !errors.Is(err, objects.ErrPending) {
			errs = append(errs, err)
		}
		if c {
			changed = true
			names = append(names, v.Name)
		}
	}
	if changed && f.log != nil {
		sort.Strings(names)
		f.log.Info("pod volumes updated", "pod", pod.Namespace+"/"+pod.Name, "volumes", names)
	}
	return changed, errors.Join(errs...)
}
