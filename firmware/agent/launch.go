package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// EnvLauncher names the launcher (the binary systemd starts, as
// os.Executable saw it at the first start): a daemon that restarts into a
// new or an old version executes it again, so the launcher decides.
const EnvLauncher = "PODVISOR_LAUNCHER"

// Candidate is a slot as the launcher sees it.
type Candidate struct {
	Name   string
	Binary string // its podvisor, symlinks resolved
	Record Record
	// Broken says why it cannot run ("" if it can): no readable record,
	// its podvisor missing or not the one the record names.
	Broken string
}

// Action is what the launcher does.
type Action int

const (
	// Continue: this process runs the daemon itself.
	Continue Action = iota
	// Exec: execute Path with the same arguments.
	Exec
)

// Launch is the launcher's decision.
type Launch struct {
	Action Action
	Path   string
	// Decrement: count this start of the current trial slot (before the
	// exec, durably).
	Decrement bool
	// RollBack, when set, is why the current slot is rolled back first
	// (current -> previous); Path is then previous's binary, or Action is
	// Continue for the factory binary.
	RollBack string
}

// Decide is the launcher's decision from the current and previous slots
// (nil: no link) and the running binary's path, without I/O.
func Decide(self string, current, previous *Candidate) Launch {
	if current == nil || current.Binary == self {
		return Launch{Action: Continue} // no slot: the packaged binary; or already current
	}
	var reason string
	switch r := current.Record; {
	case current.Broken != "":
		reason = fmt.Sprintf("slot %s cannot start: %s", current.Name, current.Broken)
	case r.State == StateFailed:
		reason = r.LastError // a rollback cut short: finish it
		if reason == "" {
			reason = r.Version + " failed"
		}
	case r.State == StateTrial && r.TriesLeft <= 0:
		reason = fmt.Sprintf("%s started %d times without becoming ready", r.Version, Tries)
		if r.LastError != "" {
			reason += ": " + r.LastError
		}
	case r.State == StateTrial:
		return Launch{Action: Exec, Path: current.Binary, Decrement: true}
	default:
		return Launch{Action: Exec, Path: current.Binary}
	}
	l := Launch{Action: Continue, RollBack: reason}
	if previous != nil && previous.Broken == "" && previous.Record.State == StateCommitted && previous.Binary != self {
		l.Action, l.Path = Exec, previous.Binary
	}
	return l
}

// candidate checks a linked slot: its record, and its podvisor by size,
// and by hash for a trial slot (hashed at most Tries times).
func (l Layout) candidate(link string) *Candidate {
	s, err := l.Linked(link)
	if s == nil {
		return nil
	}
	c := &Candidate{Name: s.Name}
	if err != nil {
		c.Broken = err.Error()
		return c
	}
	c.Record = s.Record
	bin := s.Binary()
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	c.Binary = bin
	want, _ := s.Record.file(Binary)
	st, err := os.Stat(bin)
	switch {
	case err != nil:
		c.Broken = err.Error()
	case !st.Mode().IsRegular() || st.Size() != want.Size:
		c.Broken = fmt.Sprintf("%s is %d bytes, slot.json says %d", Binary, st.Size(), want.Size)
	case s.Record.State == StateTrial:
		if sum, err := fileSHA256(bin); err != nil {
			c.Broken = err.Error()
		} else if sum != want.SHA256 {
			c.Broken = fmt.Sprintf("%s has SHA-256 %s, slot.json says %s", Binary, sum, want.SHA256)
		}
	}
	return c
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Self is the running binary, symlinks resolved.
func Self() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

// Prepare is the launcher's I/O: it reads the slots of dataDir, rolls the
// current one back if it must (recording why), counts a trial's start and
// returns the binary to execute ("" to run on as this process). It
// records the launcher's path in the environment at the first start.
func Prepare(dataDir string) (path string, decided Launch, err error) {
	self, err := Self()
	if err != nil {
		return "", Launch{}, fmt.Errorf("launcher: %w", err)
	}
	if os.Getenv(EnvLauncher) == "" {
		os.Setenv(EnvLauncher, self)
	}
	l := NewLayout(dataDir)
	if _, err := os.Lstat(l.link(linkCurrent)); err != nil {
		return "", Launch{Action: Continue}, nil // no slot: nothing changes
	}
	decided = Decide(self, l.candidate(linkCurrent), l.candidate(linkPrevious))
	if decided.RollBack != "" {
		if _, err := l.RollBack(decided.RollBack); err != nil {
			return "", decided, fmt.Errorf("launcher: %w", err)
		}
	}
	if decided.Decrement {
		cur, err := l.Linked(linkCurrent)
		if err != nil {
			return "", decided, fmt.Errorf("launcher: %w", err)
		}
		cur.Record.TriesLeft--
		if err := writeRecord(cur.Dir, cur.Record); err != nil {
			return "", decided, fmt.Errorf("launcher: counting the start of %s: %w", cur.Name, err)
		}
	}
	if decided.Action == Exec {
		return decided.Path, decided, nil
	}
	return "", decided, nil
}

// Run is the launcher: it executes the version the slots of dataDir name
// with args (os.Args[1:]) in this process, so that it keeps the PID (the
// service manager's main PID), or returns to run on as this process. A
// slot that cannot be executed (a data directory mounted noexec, a binary
// for another CPU) is rolled back with the reason, down to this binary at
// worst, rather than failing every start. It logs a trial's start and a
// rollback to log (nil: nowhere): under systemd the journal then says
// which version started and why one was given up, before any daemon runs.
func Run(dataDir string, args []string, log *slog.Logger) (Launch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for {
		path, decided, err := Prepare(dataDir)
		start := path
		if start == "" {
			start = "this binary"
		}
		switch {
		case err != nil:
		case decided.RollBack != "":
			log.Warn("launcher: rolled back", "reason", decided.RollBack, "starting", start)
		case decided.Decrement:
			log.Info("launcher: starting a version on trial", "starting", start)
		}
		if err != nil || path == "" {
			return decided, err
		}
		log.Info("launcher: executing the current version", "binary", path, "trial", decided.Decrement)
		err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
		reason := fmt.Sprintf("executing %s: %v", path, err)
		if _, rerr := NewLayout(dataDir).RollBack(reason); rerr != nil {
			return decided, fmt.Errorf("launcher: executing %s: %w (and rolling back: %v)", path, err, rerr)
		}
		log.Warn("launcher: rolled back", "reason", reason)
	}
}

// Relaunch executes the launcher again with args, as the restart into a
// new version or the rollback from one does.
func Relaunch(args []string) error {
	path := os.Getenv(EnvLauncher)
	if path == "" {
		var err error
		if path, err = Self(); err != nil {
			return err
		}
	}
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("executing the launcher %s: %w", path, err)
}

// RunningRelease is the release version of the slot this process runs
// from ("" when it runs from no slot: the packaged binary). The daemon
// reports it rather than its build stamp: the operator named and signed
// these bytes with it, and an update counts a device done by it.
func RunningRelease(dataDir string) string {
	self, err := Self()
	if err != nil {
		return ""
	}
	cur, err := NewLayout(dataDir).Linked("current")
	if err != nil || cur == nil || !sameFile(self, cur.Binary()) {
		return ""
	}
	return cur.Record.Version
}
