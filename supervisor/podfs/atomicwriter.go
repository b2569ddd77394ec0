package podfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
)

// The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go), ported:
// the files of a configMap, secret, downwardAPI or projected volume live
// in a hidden timestamped directory; "..data" links to it, and each
// top-level name of the payload links into "..data". An update writes a
// new timestamped directory and renames a fresh "..data_tmp" link over
// "..data": a reader sees the old files or the new ones, never a mix, and
// never a file half written. Names starting with ".." are the writer's.
//
// It offers no concurrency of its own: FS serialises writes (FS.mu).

const (
	maxFileNameLength = 255
	maxPathLength     = 4096
	dataDirName       = "..data"
	newDataDirName    = "..data_tmp"
)

// fileProjection is one file of a payload: its content and mode.
type fileProjection struct {
	Data []byte
	Mode int32
}

// atomicWrite projects payload into targetDir (which must exist) as the
// kubelet's AtomicWriter.Write does, and reports whether anything on disk
// changed. setPerms, if given, is applied to the new timestamped directory
// (named relative to targetDir) before it is published.
//
// The steps, numbered as the kubelet numbers them:
//  1. the payload is validated;
//  2. the current timestamped directory is read from "..data";
//  3. the paths of the old version no longer in the payload are found;
//  4. the old data is compared with the payload: equal, nothing is written;
//  5. a new timestamped directory is made,
//  6. the payload written into it,
//  7. its permissions set,
//  8. "..data_tmp" made to link to it,
//  9. and renamed over "..data" (atomic);
//  10. the user-visible links "name -> ..data/name" are made for the
//     top-level names that lack one;
//  11. top-level names no longer in the payload are removed;
//  12. the timestamped directories older than the one just replaced are
//     removed.
//
// Step 12 is where this writer parts from the kubelet's, which removes
// the directory it just replaced: a reader whose open had resolved
// "..data" to it an instant before the swap would then find no file,
// although the file is there before and after. Keeping one generation
// back closes that window; the next update removes it.
func atomicWrite(targetDir string, payload map[string]fileProjection, setPerms func(tsDirName string) error) (changed bool, err error) {
	// (1)
	clean, err := validatePayload(payload)
	if err != nil {
		return false, err
	}
	// (2)
	dataDirPath := filepath.Join(targetDir, dataDirName)
	oldTsDir, err := os.Readlink(dataDirPath)
	if err != nil {
		if !os.IsNotExist(err) {
			return false, fmt.Errorf("reading the link of the data directory: %w", err)
		}
		oldTsDir = ""
	}
	oldTsPath := filepath.Join(targetDir, oldTsDir)

	var toRemove sets.Set[string]
	write, replaced := true, oldTsDir
	if oldTsDir != "" {
		// (3)
		if toRemove, err = pathsToRemove(clean, oldTsPath); err != nil {
			return false, fmt.Errorf("finding the files to remove: %w", err)
		}
		// (4)
		should, err := shouldWritePayload(clean, oldTsPath)
		if err != nil {
			return false, fmt.Errorf("comparing the payload with the volume: %w", err)
		}
		if !should && len(toRemove) == 0 {
			// Up to date; the links are made all the same (as the
			// kubelet does since kubernetes#121472) and the data kept.
			write = false
		}
	}
	if write {
		// (5)
		tsDir, err := newTimestampDir(targetDir)
		if err != nil {
			return false, err
		}
		tsDirName := filepath.Base(tsDir)
		// (6)
		if err := writePayloadToDir(clean, tsDir); err != nil {
			os.RemoveAll(tsDir)
			return false, err
		}
		// (7)
		if setPerms != nil {
			if err := setPerms(tsDirName); err != nil {
				os.RemoveAll(tsDir)
				return false, fmt.Errorf("applying ownership settings: %w", err)
			}
		}
		// (8)
		newDataDirPath := filepath.Join(targetDir, newDataDirName)
		os.Remove(newDataDirPath) // a crash's leftover
		if err := os.Symlink(tsDirName, newDataDirPath); err != nil {
			os.RemoveAll(tsDir)
			return false, fmt.Errorf("creating the link for the atomic update: %w", err)
		}
		// (9)
		if err := os.Rename(newDataDirPath, dataDirPath); err != nil {
			os.Remove(newDataDirPath)
			os.RemoveAll(tsDir)
			return false, fmt.Errorf("renaming the link of the data directory: %w", err)
		}
	}
	// (10)
	made, err := createUserVisibleFiles(targetDir, clean)
	if err != nil {
		return write, fmt.Errorf("creating the visible links: %w", err)
	}
	// (11)
	if err := removeUserVisiblePaths(targetDir, toRemove); err != nil {
		return true, fmt.Errorf("removing old visible links: %w", err)
	}
	// (12)
	if write {
		if err := removeOldDataDirs(targetDir, replaced); err != nil {
			return true, err
		}
	}
	return write || made, nil
}

// removeOldDataDirs removes the timestamped directories other than the
// one "..data" links to and keep (the one it linked to before).
func removeOldDataDirs(targetDir, keep string) error {
	current, err := os.Readlink(filepath.Join(targetDir, dataDirName))
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(targetDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "..") || name == current || name == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(targetDir, name)); err != nil {
			return fmt.Errorf("removing the old data directory %s: %w", name, err)
		}
	}
	return nil
}

// validatePayload refuses a path the writer must not write and returns the
// payload with its paths cleaned.
func validatePayload(payload map[string]fileProjection) (map[string]fileProjection, error) {
	clean := make(map[string]fileProjection, len(payload))
	for k, content := range payload {
		if err := validatePath(k); err != nil {
			return nil, err
		}
		clean[path.Clean(k)] = content
	}
	return clean, nil
}

// validatePath is the kubelet's: not empty, relative, no ".." element, not
// starting with ".." (the writer's own names), names and path bounded.
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if path.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > maxPathLength {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	}
	items := strings.Split(p, "/")
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

// shouldWritePayload reports whether a file of the payload is missing from
// the old data or differs from it.
func shouldWritePayload(payload map[string]fileProjection, oldTsDir string) (bool, error) {
	for p, fp := range payload {
		old, err := os.ReadFile(filepath.Join(oldTsDir, p))
		// A path that was a directory and is now a file is a change (the
		// kubelet would fail on it for good).
		if os.IsNotExist(err) || errors.Is(err, syscall.EISDIR) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if !bytes.Equal(fp.Data, old) {
			return true, nil
		}
	}
	return false, nil
}

// pathsToRemove are the paths of the old data that neither are in the
// payload nor lead to one of its files.
func pathsToRemove(payload map[string]fileProjection, oldTsDir string) (sets.Set[string], error) {
	paths := sets.New[string]()
	err := filepath.WalkDir(oldTsDir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, oldTsDir), "/")
		if rel != "" {
			paths.Insert(rel)
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keep := sets.New[string]()
	for file := range payload {
		for sub := file; sub != "" && sub != "."; sub = path.Dir(sub) {
			keep.Insert(sub)
		}
	}
	return paths.Difference(keep), nil
}

// newTimestampDir makes a fresh "..<UTC time>.<random>" directory, 0755
// whatever the umask, so that any user may reach the files below.
func newTimestampDir(targetDir string) (string, error) {
	tsDir, err := os.MkdirTemp(targetDir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", fmt.Errorf("creating a data directory: %w", err)
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		os.RemoveAll(tsDir)
		return "", err
	}
	return tsDir, nil
}

// writePayloadToDir writes the payload's files, with their modes whatever
// the umask, into dir (fresh, the daemon's own).
func writePayloadToDir(payload map[string]fileProjection, dir string) error {
	for p, fp := range payload {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
			return err
		}
		mode := os.FileMode(fp.Mode) & os.ModePerm
		if err := os.WriteFile(full, fp.Data, mode); err != nil {
			return err
		}
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return nil
}

// createUserVisibleFiles makes "name -> ..data/name" for each top-level
// name of the payload that has no link yet, and reports whether it made
// one.
func createUserVisibleFiles(targetDir string, payload map[string]fileProjection) (bool, error) {
	made := false
	for p := range payload {
		name, _, _ := strings.Cut(p, "/")
		visible := filepath.Join(targetDir, name)
		if _, err := os.Readlink(visible); err == nil || !os.IsNotExist(err) {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), visible); err != nil {
			return made, err
		}
		made = true
	}
	return made, nil
}

// removeUserVisiblePaths removes the top-level links of paths (those
// below them went with the old data directory).
func removeUserVisiblePaths(targetDir string, paths sets.Set[string]) error {
	var last error
	for p := range paths {
		if strings.Contains(p, "/") {
			continue
		}
		if err := os.Remove(filepath.Join(targetDir, p)); err != nil {
			last = err
		}
	}
	return last
}
