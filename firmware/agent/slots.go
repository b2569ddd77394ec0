// Package agent is the device side of podvisor's self-update: the slots
// that hold installed versions under <dataDir>/agent, the launcher that
// starts the current one with boot counting, the install of an order's
// release (download, verify, stage, switch, restart), the commit gate of
// a new version and its rollback. Firmware orders are downloaded and
// verified the same way and handed to a Driver. docs/selfupdate.md, "On
// the device", describes the layout and every step.
//
// Every change of the layout is made so that a power cut at any moment
// leaves either the old or the new version complete: a slot is written in
// a .tmp directory, fsynced and renamed into place; the current and
// previous links are replaced by rename(2).
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Slot states, as slot.json records them.
const (
	StateTrial     = "trial"     // installed, switched to, not proven yet
	StateCommitted = "committed" // passed its commit gate
	// StateFailed: rolled back (the gate failed or the launcher gave up);
	// LastError says why. Kept until the version that came back reported
	// it.
	StateFailed = "failed"
)

// Tries is how many starts a trial slot gets before the launcher rolls it
// back.
const Tries = 2

// Binary is the file the launcher executes in a slot.
const Binary = "podvisor"

// File is one installed file of a slot.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Record is a slot's slot.json.
type Record struct {
	Version   string `json:"version"`
	Order     int64  `json:"order"`
	Files     []File `json:"artifacts"`
	State     string `json:"state"`
	TriesLeft int    `json:"triesLeft"`
	LastError string `json:"lastError,omitempty"`
}

// file returns the record of the named file.
func (r *Record) file(name string) (File, bool) {
	for _, f := range r.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// Layout is the update's directory, <dataDir>/agent.
type Layout struct{ Dir string }

// NewLayout is the layout under a data directory.
func NewLayout(dataDir string) Layout { return Layout{Dir: filepath.Join(dataDir, "agent")} }

func (l Layout) slots() string              { return filepath.Join(l.Dir, "slots") }
func (l Layout) link(name string) string    { return filepath.Join(l.Dir, name) }
func (l Layout) slotDir(name string) string { return filepath.Join(l.slots(), name) }
func (l Layout) downloads() string          { return filepath.Join(l.Dir, "download") }
func (l Layout) handoffPath() string        { return filepath.Join(l.Dir, "handoff.json") }
func (l Layout) statePath() string          { return filepath.Join(l.Dir, "state.json") }

// Links.
const (
	linkCurrent  = "current"
	linkPrevious = "previous"
)

// SlotName is a slot's directory name: version and the first 8 hex digits
// of its podvisor's SHA-256, so that two builds of one version differ.
func SlotName(version, podvisorSHA string) string {
	if len(podvisorSHA) > 8 {
		podvisorSHA = podvisorSHA[:8]
	}
	return version + "-" + podvisorSHA
}

// Slot is an installed slot.
type Slot struct {
	Name   string
	Dir    string
	Record Record
}

// Binary is the slot's podvisor.
func (s *Slot) Binary() string { return filepath.Join(s.Dir, Binary) }

// Linked returns the slot a link names: nil, nil when the link is absent;
// the slot's name with an error when the slot or its record is broken.
func (l Layout) Linked(link string) (*Slot, error) {
	target, err := os.Readlink(l.link(link))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", link, err)
	}
	name := filepath.Base(target)
	if target != filepath.Join("slots", name) || !validSlotName(name) {
		return &Slot{Name: name}, fmt.Errorf("%s: link to %q, want slots/NAME", link, target)
	}
	return l.open(name)
}

// open reads a slot's record.
func (l Layout) open(name string) (*Slot, error) {
	s := &Slot{Name: name, Dir: l.slotDir(name)}
	data, err := readBounded(filepath.Join(s.Dir, "slot.json"), 1<<16)
	if err != nil {
		return s, fmt.Errorf("slot %s: %w", name, err)
	}
	if err := json.Unmarshal(data, &s.Record); err != nil {
		return s, fmt.Errorf("slot %s: slot.json: %w", name, err)
	}
	switch s.Record.State {
	case StateTrial, StateCommitted, StateFailed:
	default:
		return s, fmt.Errorf("slot %s: slot.json: state %q", name, s.Record.State)
	}
	if _, ok := s.Record.file(Binary); !ok {
		return s, fmt.Errorf("slot %s: slot.json lists no %s", name, Binary)
	}
	return s, nil
}

func validSlotName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && !strings.HasSuffix(name, ".tmp")
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s: over %d bytes", path, limit)
	}
	return data, err
}

// writeRecord replaces a slot's slot.json: written beside, fsynced,
// renamed, the directory fsynced.
func writeRecord(dir string, r Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "slot.json"), data)
}

// writeFileAtomic writes a file so that a power cut leaves the old or the
// new content: a temporary beside it, fsynced, renamed, the directory
// fsynced.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// setLink points link at slots/name, or removes it for name "": a new
// link beside, renamed over the old one, the directory fsynced.
func (l Layout) setLink(link, name string) error {
	path := l.link(link)
	if name == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return syncDir(l.Dir)
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(filepath.Join("slots", name), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(l.Dir)
}

// crashPoint is called at each step of an install and a switch; the
// power-cut tests kill the process there.
var crashPoint = func(step string) {}

// Switch makes slot name current and the current one previous (previous
// first: a cut between the two renames leaves the old version current).
// Without a current slot, previous is removed: the factory binary is the
// way back.
func (l Layout) Switch(name string) error {
	cur, err := l.Linked(linkCurrent)
	prev := ""
	if cur != nil && err == nil && cur.Record.State == StateCommitted {
		prev = cur.Name
	} else if p, perr := l.Linked(linkPrevious); cur != nil && p != nil && perr == nil {
		prev = p.Name // a current not committed is no way back; keep the one there is
	}
	if err := l.setLink(linkPrevious, prev); err != nil {
		return fmt.Errorf("switching previous: %w", err)
	}
	crashPoint("between-renames")
	if err := l.setLink(linkCurrent, name); err != nil {
		return fmt.Errorf("switching current: %w", err)
	}
	return nil
}

// RollBack records why the current slot failed and makes previous current
// again (no previous: no current, the factory binary). It returns the
// failed slot's record.
func (l Layout) RollBack(reason string) (*Slot, error) {
	cur, _ := l.Linked(linkCurrent)
	if cur != nil && cur.Dir != "" {
		cur.Record.State, cur.Record.LastError, cur.Record.TriesLeft = StateFailed, truncate(reason, 512), 0
		if err := writeRecord(cur.Dir, cur.Record); err != nil && !errors.Is(err, os.ErrNotExist) {
			return cur, fmt.Errorf("recording the rollback of %s: %w", cur.Name, err)
		}
	}
	prev, err := l.Linked(linkPrevious)
	back := ""
	if prev != nil && err == nil && prev.Record.State == StateCommitted {
		back = prev.Name
	}
	if err := l.setLink(linkCurrent, back); err != nil {
		return cur, fmt.Errorf("rolling back: %w", err)
	}
	if back != "" {
		if err := l.setLink(linkPrevious, ""); err != nil {
			return cur, fmt.Errorf("rolling back: %w", err)
		}
	}
	return cur, nil
}

// Commit marks the current slot committed.
func (l Layout) Commit() (*Slot, error) {
	cur, err := l.Linked(linkCurrent)
	if err != nil || cur == nil {
		return nil, fmt.Errorf("commit: no current slot: %v", err)
	}
	cur.Record.State, cur.Record.TriesLeft, cur.Record.LastError = StateCommitted, 0, ""
	return cur, writeRecord(cur.Dir, cur.Record)
}

// Failed lists the rolled-back slots, oldest order first.
func (l Layout) Failed() []*Slot {
	var out []*Slot
	for _, name := range l.slotNames() {
		if s, err := l.open(name); err == nil && s.Record.State == StateFailed {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Record.Order < out[j].Record.Order })
	return out
}

func (l Layout) slotNames() []string {
	entries, _ := os.ReadDir(l.slots())
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// Remove deletes a slot.
func (l Layout) Remove(name string) error {
	if !validSlotName(name) {
		return fmt.Errorf("slot name %q", name)
	}
	return os.RemoveAll(l.slotDir(name))
}

// Collect removes every slot but current, previous, keep and the failed
// ones (removed once reported), and what a crash left: .tmp slot
// directories, link temporaries, downloads of orders older than order
// (a newer one's are resumed when its order comes again).
func (l Layout) Collect(order int64, keep ...string) {
	live := map[string]bool{}
	for _, k := range keep {
		live[k] = true
	}
	for _, link := range []string{linkCurrent, linkPrevious} {
		if t, err := os.Readlink(l.link(link)); err == nil {
			live[filepath.Base(t)] = true
		}
		os.Remove(l.link(link) + ".tmp")
	}
	for _, name := range l.slotNames() {
		if live[name] {
			continue
		}
		if !strings.HasSuffix(name, ".tmp") {
			if s, err := l.open(name); err == nil && s.Record.State == StateFailed {
				continue // reported first, then removed
			}
		}
		os.RemoveAll(l.slotDir(name))
	}
	entries, _ := os.ReadDir(l.downloads())
	for _, e := range entries {
		if n, err := strconv.ParseInt(e.Name(), 10, 64); err != nil || n < order {
			os.RemoveAll(filepath.Join(l.downloads(), e.Name()))
		}
	}
	os.Remove(l.statePath() + ".tmp")
	os.Remove(l.handoffPath() + ".tmp")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
