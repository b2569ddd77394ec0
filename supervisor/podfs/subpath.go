package podfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/safepath"
)

// stagedMountsDir holds, under a pod's directory, the binds handed to the
// runtime in place of subPaths and allowed hostPaths, by volume,
// container and mount index: the kubelet's volume-subpaths.
const stagedMountsDir = "volume-subpaths"

// stageMount resolves a container's mount of vol (at subPath, if any)
// without following links, as the kubelet's safe subpath does, and
// bind-mounts the opened descriptor onto a staging path only the daemon
// writes to. The runtime gets that path: it mounts exactly the file that
// was resolved, whatever a container does to the volume meanwhile. A
// missing subPath is created as a directory with the volume's mode. In a
// volume the daemon wrote with the atomic writer, the writer's own links
// are followed (as the kubelet follows them), beneath the volume: the
// bind is of the file the key names now, and does not follow later
// updates (as in Kubernetes).
func (f *FS) stageMount(uid types.UID, container string, index int, vol volume, subPath string) (string, error) {
	root, err := openVolume(vol)
	if err != nil {
		return "", err
	}
	defer root.Close()
	src := root
	if subPath != "" {
		// As the kubelet: a subPath that does not seem to exist is
		// created first (and a failure is said so); whether it seems to
		// only picks the step, both resolve without links.
		if _, serr := os.Stat(filepath.Join(vol.path, subPath)); errors.Is(serr, os.ErrNotExist) {
			mode, merr := safepath.Mode(root)
			if merr != nil {
				return "", merr
			}
			made, err := safepath.MkdirAll(root, subPath, mode)
			if err != nil {
				return "", &subPathError{create: true, err: fmt.Errorf("creating subPath %q of %s: %w", subPath, vol.path, err)}
			}
			made.Close()
		}
		open := safepath.Open
		if vol.atomic {
			open = openThroughOwnLinks
		}
		if src, err = open(root, subPath); err != nil {
			return "", &subPathError{err: fmt.Errorf("subPath %q of %s: %w", subPath, vol.path, err)}
		}
		defer src.Close()
	}
	target := filepath.Join(f.podDir(uid), stagedMountsDir, vol.name, container, strconv.Itoa(index))
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	if err := safepath.BindAt(src, target); err != nil {
		return "", err
	}
	return target, nil
}

// subPathError is a subPath that could not be created (create) or
// resolved.
type subPathError struct {
	create bool
	err    error
}

func (e *subPathError) Error() string { return e.err.Error() }
func (e *subPathError) Unwrap() error { return e.err }

// openVolume opens a volume's root: a path of the daemon's own or one
// the device allows any pod to name is opened as it is; a hostPath under
// security.allowedHostPaths is resolved beneath its allowed directory.
func openVolume(vol volume) (*os.File, error) {
	if vol.allowedRoot == "" {
		return safepath.OpenTrusted(vol.path)
	}
	rel, err := filepath.Rel(vol.allowedRoot, vol.path)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		rel = ""
	}
	// Checked again on what is mounted, not only on what setupVolumes saw.
	return openAllowedHostPath(vol.allowedRoot, rel, vol.hostPathType)
}

// cleanStagedMounts unmounts and removes a pod's staged mounts. Nothing
// is removed recursively: a bind that cannot be unmounted stops it, with
// its volume's files untouched.
func cleanStagedMounts(podDir string) error {
	base := filepath.Join(podDir, stagedMountsDir)
	targets, _ := filepath.Glob(filepath.Join(base, "*", "*", "*"))
	var errs []error
	for _, t := range targets {
		errs = append(errs, safepath.Unbind(t))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	dirs, _ := filepath.Glob(filepath.Join(base, "*", "*"))
	vols, _ := filepath.Glob(filepath.Join(base, "*"))
	for _, dir := range append(append(dirs, vols...), base) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
