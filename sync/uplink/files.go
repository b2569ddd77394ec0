package uplink

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Two small files beside state.db hold what must outlive it: the
// installation's instance name, and the newest generation seen from the
// hub, so that a device whose database was reset does not take a replayed
// older document (signed, but withdrawn since) for the hub's word.
const (
	instanceFile   = "hub-instance"
	generationFile = "hub-generation"
)

// loadInstance reads the installation's instance name, making it at the
// first start.
func loadInstance(dir string) (string, error) {
	path := filepath.Join(dir, instanceFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); len(id) >= 8 && len(id) <= 64 {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("instance name %s: %w", path, err)
	}
	raw := make([]byte, 8)
	rand.Read(raw)
	id := hex.EncodeToString(raw)
	return id, writeAtomic(path, []byte(id+"\n"))
}

// loadFloor reads the newest generation seen from the hub whose key is
// keyID; another key (another hub) has none.
func loadFloor(dir, keyID string) (int64, error) {
	return loadKeyed(filepath.Join(dir, generationFile), keyID, "generation")
}

// loadKeyed reads a "<hub key id> <number>" file: the number recorded
// under the hub key keyID, 0 when the file is absent or another key's.
func loadKeyed(path, keyID, what string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	key, num, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	n, perr := strconv.ParseInt(num, 10, 64)
	if !ok || perr != nil || n < 0 {
		return 0, fmt.Errorf("%s: want \"<hub key id> <%s>\", found %q", path, what, b)
	}
	if key != keyID {
		return 0, nil
	}
	return n, nil
}

// saveFloor records the newest generation applied from the hub keyID.
func saveFloor(dir, keyID string, gen int64) error {
	return writeAtomic(filepath.Join(dir, generationFile), fmt.Appendf(nil, "%s %d\n", keyID, gen))
}

// writeAtomic replaces a file whole and durably: a crash leaves the old
// content or the new, never a torn one.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
