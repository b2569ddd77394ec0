package firmware

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Record is what a driver keeps of its last install that the tool does
// not: the slot it went to and the boot it happened in, so that a restart
// of podvisor before the reboot is not taken for the new system, and a
// boot into the old slot is seen as a fallback.
type Record struct {
	Driver  string    `json:"driver"`
	Slot    string    `json:"slot,omitempty"`
	Version string    `json:"version,omitempty"`
	BootID  string    `json:"bootID"`
	Time    time.Time `json:"time"`
}

// maxRecord bounds a record file: a real one is ~200 bytes.
const maxRecord = 4096

func recordPath(dir, driver string) string { return filepath.Join(dir, driver+"-install.json") }

// SaveRecord writes r for its driver under dir, durably (the reboot
// follows): a temporary file, fsync, rename, fsync of the directory.
func SaveRecord(dir string, r Record) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("firmware state dir: %w", err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := recordPath(dir, r.Driver)
	tmp, err := os.CreateTemp(dir, "."+r.Driver+"-install-*")
	if err != nil {
		return fmt.Errorf("firmware install record: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("firmware install record %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadRecord reads driver's record under dir; nil when there is none.
func LoadRecord(dir, driver string) (*Record, error) {
	path := recordPath(dir, driver)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("firmware install record: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return nil, fmt.Errorf("firmware install record %s: %w", path, err)
	}
	if len(data) > maxRecord {
		return nil, fmt.Errorf("firmware install record %s: larger than %d bytes", path, maxRecord)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("firmware install record %s: %w", path, err)
	}
	return &r, nil
}

// RemoveRecord forgets driver's last install, once it is settled.
func RemoveRecord(dir, driver string) error {
	err := os.Remove(recordPath(dir, driver))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firmware install record: %w", err)
	}
	return nil
}

// BootIDFile is where Linux names the current boot.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// BootID reads the current boot's ID from file (BootIDFile outside tests).
func BootID(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("boot ID: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", fmt.Errorf("boot ID: %s is empty", file)
	}
	return id, nil
}

// ThisBoot is a driver's install record and the running boot's ID: what
// every driver's Booted weighs against the tool's own state.
func ThisBoot(dir, driver, bootIDFile string) (*Record, string, error) {
	rec, err := LoadRecord(dir, driver)
	if err != nil {
		return nil, "", err
	}
	bootID, err := BootID(bootIDFile)
	if err != nil {
		return nil, "", err
	}
	return rec, bootID, nil
}
