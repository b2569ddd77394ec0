package bpfcgroup

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Have says whether a cilium/ebpf features probe answered yes. An answer
// that is neither yes nor ErrNotSupported (no privilege, a kernel quirk)
// counts as no and is appended to inconclusive, named.
func Have(inconclusive *[]string, name string, err error) bool {
	switch {
	case err == nil:
		return true
	case !errors.Is(err, ebpf.ErrNotSupported):
		*inconclusive = append(*inconclusive, fmt.Sprintf("%s: %v", name, err))
	}
	return false
}

// RemoveMemlock lifts RLIMIT_MEMLOCK, which eBPF memory counts against
// before 5.11 (after, this is a no-op). Failing is not fatal, the feature
// probes say what works: the failure is appended to inconclusive.
func RemoveMemlock(inconclusive *[]string) {
	if err := rlimit.RemoveMemlock(); err != nil {
		*inconclusive = append(*inconclusive, fmt.Sprintf("raise RLIMIT_MEMLOCK: %v", err))
	}
}

// Attachments are the programs loaded for one cgroup and what holds each
// attached.
type Attachments struct {
	progs []*ebpf.Program
	links []io.Closer
}

// Add detaches the leftovers named like spec (what a killed podvisor
// left attached without a link), loads spec and attaches it to dir for
// spec.AttachType: with BPF_PROG_ATTACH if legacy, else with a bpf_link.
// A failure to detach leftovers only costs a double event or count, so it
// goes to logf (if not nil) and Add goes on.
func (a *Attachments) Add(dir string, spec *ebpf.ProgramSpec, legacy bool, logf func(string, ...any)) error {
	if err := DetachLeftovers(dir, spec.AttachType, spec.Name); err != nil && logf != nil {
		logf("%v", err)
	}
	prog, err := ebpf.NewProgramWithOptions(spec, ebpf.ProgramOptions{LogDisabled: true})
	if err != nil {
		return fmt.Errorf("load %s program for %s: %w", spec.Name, dir, err)
	}
	var l io.Closer
	if legacy {
		l, err = attachLegacy(dir, spec.AttachType, prog)
	} else {
		l, err = link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: spec.AttachType, Program: prog})
	}
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach %s program to %s: %w", spec.Name, dir, err)
	}
	a.progs, a.links = append(a.progs, prog), append(a.links, l)
	return nil
}

// Close detaches and frees every program Add attached.
func (a Attachments) Close() error {
	var errs []error
	for _, l := range a.links {
		// A cgroup removed first has already let go of the program.
		if err := l.Close(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, p := range a.progs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// legacyAttachment is a program attached with BPF_PROG_ATTACH, as
// kernels before 5.7 must: it stays attached until detached, even after
// the process that attached it dies.
type legacyAttachment struct {
	cgroup *os.File
	prog   *ebpf.Program
	attach ebpf.AttachType
}

func attachLegacy(dir string, attach ebpf.AttachType, prog *ebpf.Program) (*legacyAttachment, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: int(cg.Fd()), Program: prog, Attach: attach, Flags: unix.BPF_F_ALLOW_MULTI,
	})
	if err != nil {
		cg.Close()
		return nil, err
	}
	return &legacyAttachment{cgroup: cg, prog: prog, attach: attach}, nil
}

func (l *legacyAttachment) Close() error {
	defer l.cgroup.Close()
	return link.RawDetachProgram(link.RawDetachProgramOptions{
		Target: int(l.cgroup.Fd()), Program: l.prog, Attach: l.attach,
	})
}

// DetachLeftovers detaches the programs called name that are attached
// to dir for attach without a bpf_link: what a killed podvisor left with
// BPF_PROG_ATTACH. Programs attached through links belong to a live
// process and are left alone.
func DetachLeftovers(dir string, attach ebpf.AttachType, name string) error {
	progs, err := AttachedPrograms(dir, attach)
	if err != nil {
		return err
	}
	cg, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer cg.Close()
	var errs []error
	for _, ap := range progs {
		if _, isLink := ap.LinkID(); isLink {
			continue
		}
		prog, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := prog.Info(); err == nil && info.Name == name {
			if err := link.RawDetachProgram(link.RawDetachProgramOptions{Target: int(cg.Fd()), Program: prog, Attach: attach}); err != nil {
				errs = append(errs, fmt.Errorf("detach leftover %s program %d from %s: %w", name, ap.ID, dir, err))
			}
		}
		prog.Close()
	}
	return errors.Join(errs...)
}

// AttachedPrograms are the programs attached to dir itself for attach.
func AttachedPrograms(dir string, attach ebpf.AttachType) ([]link.AttachedProgram, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: attach})
	if err != nil {
		return nil, fmt.Errorf("query %s programs of %s: %w", attach, dir, err)
	}
	return r.Programs, nil
}

// Programs are the programs Add loaded (for their run-time statistics).
func (a Attachments) Programs() []*ebpf.Program { return a.progs }
