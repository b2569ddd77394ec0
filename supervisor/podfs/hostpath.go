package podfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/safepath"
)

// prepareHostPath applies a hostPath volume's type rules, creating what
// the *OrCreate types ask for. Under security.allowedHostPaths it works
// on the resolved path: from the outermost allowed directory that holds
// the path, each component is opened without following links, so a link
// an earlier pod planted there can neither lead the check astray nor make
// DirectoryOrCreate create anything outside. It returns that directory
// ("" when the device allows any host path).
func (f *FS) prepareHostPath(h *v1.HostPathVolumeSource) (string, error) {
	allowed := f.allowedHostPaths
	if len(allowed) == 0 {
		return "", checkHostPath(h)
	}
	root, rel, ok := allowedRoot(h.Path, allowed)
	if !ok {
		return "", fmt.Errorf("hostPath %s is outside the host paths this device allows (%s)", h.Path, strings.Join(allowed, ", "))
	}
	opened, err := openAllowedHostPath(root, rel, h.Type)
	if err != nil {
		return "", err
	}
	opened.Close()
	return root, nil
}

// allowedRoot picks the outermost allowed directory that holds path
// (cleaned, as the admission check does) and path's rest below it. The
// outermost: an allowed directory inside another is itself writable by
// pods, so only the outer one's own path is trusted.
func allowedRoot(path string, allowed []string) (root, rel string, ok bool) {
	path = filepath.Clean(path)
	for _, a := range allowed {
		a = filepath.Clean(a)
		if path != a && a != "/" && !strings.HasPrefix(path, a+"/") {
			continue
		}
		if !ok || len(a) < len(root) {
			root, ok = a, true
		}
	}
	if ok {
		rel = strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
	}
	return root, rel, ok
}

// openAllowedHostPath opens root/rel as a hostPath of type typ, creating
// it for the *OrCreate types, and checks its type on the descriptor and
// that its resolved path lies under root's.
func openAllowedHostPath(root, rel string, typ *v1.HostPathType) (*os.File, error) {
	t := v1.HostPathUnset
	if typ != nil {
		t = *typ
	}
	path := filepath.Join(root, rel)
	if t == v1.HostPathDirectoryOrCreate {
		// The allowed directory itself is the device owner's to name.
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
	}
	rootf, err := safepath.OpenTrusted(root)
	if err != nil {
		return nil, fmt.Errorf("hostPath %s: allowed host path %s: %w", path, root, err)
	}
	defer rootf.Close()
	var f *os.File
	switch t {
	case v1.HostPathDirectoryOrCreate:
		f, err = safepath.MkdirAll(rootf, rel, 0o755)
	case v1.HostPathFileOrCreate:
		f, err = safepath.CreateFile(rootf, rel, 0o644)
	default:
		f, err = safepath.Open(rootf, rel)
	}
	if err != nil {
		if errors.Is(err, safepath.ErrSymlink) {
			return nil, fmt.Errorf("hostPath %s: %w: links below an allowed host path (security.allowedHostPaths %s) are not followed", path, err, root)
		}
		return nil, fmt.Errorf("hostPath %s: %w", path, err)
	}
	if err := checkResolved(rootf, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("hostPath %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if t != v1.HostPathUnset && !typeMatches(t, st.Mode()) {
		f.Close()
		return nil, fmt.Errorf("hostPath type check failed: %s is not a %s", path, strings.TrimSuffix(string(t), "OrCreate"))
	}
	return f, nil
}

// checkResolved is the allowed-host-path check on the path f resolved
// to, at mount time: it must be root's or below it. Resolution without
// links guarantees it; this says so where it matters.
func checkResolved(root, f *os.File) error {
	rootPath, err1 := os.Readlink(safepath.ProcPath(root))
	path, err2 := os.Readlink(safepath.ProcPath(f))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if path != rootPath && !strings.HasPrefix(path, strings.TrimSuffix(rootPath, "/")+"/") {
		return fmt.Errorf("resolves to %s, outside the allowed host path %s", path, rootPath)
	}
	return nil
}

// checkHostPath applies hostPath's type rules where the device allows any
// host path, creating what the *OrCreate types ask for. Links are
// followed, as the kubelet does: the pod could name their target anyway.
func checkHostPath(h *v1.HostPathVolumeSource) error {
	typ := v1.HostPathUnset
	if h.Type != nil {
		typ = *h.Type
	}
	st, err := os.Stat(h.Path)
	switch typ {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if os.IsNotExist(err) {
			return os.MkdirAll(h.Path, 0o755)
		}
	case v1.HostPathFileOrCreate:
		if os.IsNotExist(err) {
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_RDONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %s is not a %s: %w", h.Path, strings.TrimSuffix(string(typ), "OrCreate"), err)
	}
	if !typeMatches(typ, st.Mode()) {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", h.Path, strings.TrimSuffix(string(typ), "OrCreate"))
	}
	return nil
}

// typeMatches reports whether a file of mode m is what a hostPath type
// asks for.
func typeMatches(typ v1.HostPathType, m os.FileMode) bool {
	switch typ {
	case v1.HostPathDirectory, v1.HostPathDirectoryOrCreate:
		return m.IsDir()
	case v1.HostPathFile, v1.HostPathFileOrCreate:
		return m.IsRegular()
	case v1.HostPathSocket:
		return m&os.ModeSocket != 0
	case v1.HostPathCharDev:
		return m&os.ModeCharDevice != 0
	case v1.HostPathBlockDev:
		return m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0
	}
	return true
}
