// Package swupdate is the firmware driver for SWUpdate, through its two
// local sockets: the control socket (REQ_INSTALL, then the .swu streamed
// on the same connection; GET_STATUS for SWUpdate's messages; the update
// state) and the progress socket (a progress_msg per step).
//
// The health gate uses SWUpdate's own update state, the bootloader
// variable ustate: SWUpdate sets it to 1 (installed) after an install;
// the running system is pending while it is 1 or 2 (testing); podvisor
// resets it to 0 after its health check passed, or sets 3 (failed) when
// the check failed, through the control socket's SET_UPDATE_STATE, as
// SWUpdate's own suricatta does. Whether a 3 makes the bootloader fall
// back is the board's bootloader script's decision, as with SWUpdate
// anywhere.
package swupdate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/podvisor/podvisor/firmware"
)

// Name is the driver's name in the config.
const Name = "swupdate"

// The sockets' paths: SWUpdate's compiled-in defaults (Debian's and
// older builds in /tmp, newer ones under /run/swupdate); the first that
// exists is used when the config names none.
var (
	ControlPaths  = []string{"/tmp/sockinstctrl", "/run/swupdate/sockinstctrl"}
	ProgressPaths = []string{"/tmp/swupdateprog", "/run/swupdate/swupdateprog"}
)

func init() {
	firmware.Register(Name, func(c firmware.Config) (firmware.Driver, error) {
		d := New(c.SWUpdateControl, c.SWUpdateProgress, c.StateDir)
		if c.SWUpdateSelect != "" {
			set, mode, ok := strings.Cut(c.SWUpdateSelect, ",")
			if !ok || set == "" || mode == "" {
				return nil, fmt.Errorf("firmware.swupdate.select %q: want SOFTWARE_SET,MODE (as swupdate -e)", c.SWUpdateSelect)
			}
			d.SoftwareSet, d.RunningMode = set, mode
		}
		return d, nil
	})
}

// Driver talks to a running SWUpdate.
type Driver struct {
	// Control and Progress are SWUpdate's sockets; "" finds them.
	Control, Progress string
	// SoftwareSet and RunningMode select the images to install (swupdate
	// -e SET,MODE; the set must be in SWUpdate's -q accepted list); ""
	// leaves SWUpdate's own selection.
	SoftwareSet, RunningMode string
	StateDir                 string
	BootIDFile               string
	layout                   layout
}

// New returns a driver for SWUpdate's sockets ("" finds them), keeping its
// install record in stateDir.
func New(control, progress, stateDir string) *Driver {
	return &Driver{Control: control, Progress: progress, StateDir: stateDir, BootIDFile: firmware.BootIDFile, layout: hostLayout()}
}

// Name implements firmware.Driver.
func (d *Driver) Name() string { return Name }

func find(configured string, paths []string) string {
	if configured != "" {
		return configured
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return paths[0]
}

func dial(ctx context.Context, path, what string) (net.Conn, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("swupdate: %s socket: %w (is SWUpdate running?)", what, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return conn, nil
}

// ask sends one control message and reads the answer, on a connection of
// its own (SWUpdate closes it after answering).
func (d *Driver) ask(ctx context.Context, msg []byte) (reply, error) {
	conn, err := dial(ctx, find(d.Control, ControlPaths), "control")
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	// One write: SWUpdate reads the message in one read and drops a
	// fragment.
	if _, err := conn.Write(msg); err != nil {
		return reply{}, fmt.Errorf("swupdate: control socket: %w", err)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, b); err != nil {
		return reply{}, fmt.Errorf("swupdate: control socket: reading the answer: %w", err)
	}
	return d.layout.parseReply(b), nil
}

// Install implements firmware.Driver: the .swu is streamed to SWUpdate,
// which verifies it (signature, hashes, hardware compatibility) and
// installs it with its handlers.
func (d *Driver) Install(ctx context.Context, bundle string, progress func(firmware.Progress)) error {
	f, err := os.Open(bundle)
	if err != nil {
		return fmt.Errorf("swupdate: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("swupdate: %s is not a regular file", bundle)
	}
	// Listen to progress before starting, not to miss the first steps.
	prog, err := dial(ctx, find(d.Progress, ProgressPaths), "progress")
	if err != nil {
		return err
	}
	defer prog.Close()
	stop := context.AfterFunc(ctx, func() { prog.SetDeadline(time.Now()) })
	defer stop()

	ctrl, err := dial(ctx, find(d.Control, ControlPaths), "control")
	if err != nil {
		return err
	}
	defer ctrl.Close()
	stopCtrl := context.AfterFunc(ctx, func() { ctrl.SetDeadline(time.Now()) })
	defer stopCtrl()
	req := d.layout.request(reqInstall, fi.Size(), "podvisor", d.SoftwareSet, d.RunningMode)
	if _, err := ctrl.Write(req); err != nil {
		return fmt.Errorf("swupdate: control socket: %w", err)
	}
	ans := make([]byte, len(req))
	if _, err := io.ReadFull(ctrl, ans); err != nil {
		return fmt.Errorf("swupdate: control socket: reading the answer to the install request: %w", err)
	}
	if r := d.layout.parseReply(ans); r.typ != ack {
		why := r.msg
		if why == "" {
			why = "refused (a software set or mode it does not accept, or another API version)"
		}
		return fmt.Errorf("swupdate: install of %s: %s", bundle, why)
	}
	// SWUpdate reads the stream as it installs; on a bad .swu it stops
	// reading, and the progress socket says why the install ended.
	streamed := make(chan error, 1)
	go func() {
		_, err := io.Copy(ctrl, f)
		ctrl.Close()
		streamed <- err
	}()

	last := -1
	buf := make([]byte, d.layout.progress().size)
	for {
		if _, err := io.ReadFull(prog, buf); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("swupdate: stopped waiting for the install of %s: %w", bundle, ctx.Err())
			}
			return fmt.Errorf("swupdate: progress socket closed during the install of %s: %w", bundle, err)
		}
		m := d.layout.parseProgress(buf)
		if p := m.percent(); p > last && progress != nil {
			last = p
			progress(firmware.Progress{Percent: p, Message: strings.TrimSpace(m.image + " " + m.handler)})
		}
		switch m.status {
		case statusSuccess, statusFailure:
			why, err := d.settle(ctx)
			serr := <-streamed
			if m.status == statusSuccess {
				if err != nil {
					return fmt.Errorf("swupdate: installed, but %w", err)
				}
				return d.record()
			}
			if why == "" {
				why = m.info
			}
			if why == "" && serr != nil {
				why = serr.Error()
			}
			return fmt.Errorf("swupdate: install of %s failed: %s", bundle, why)
		}
	}
}

// maxErrors bounds what Install reports of SWUpdate's messages.
const maxErrors = 1024

// settleTimeout bounds the wait for SWUpdate to be idle after an install.
const settleTimeout = 30 * time.Second

// settle waits until SWUpdate is idle again (it answers the next install
// request "Installation in progress" until then), reading the queue of
// notifications of the install that ended as swupdate-client does
// (GET_STATUS): it returns the error messages in it.
func (d *Driver) settle(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	var msgs []string
	n := 0
	for {
		r, err := d.ask(ctx, d.layout.request(getStatus, 0, "", "", ""))
		if err != nil {
			return strings.Join(msgs, "; "), fmt.Errorf("waiting for SWUpdate to be idle: %w", err)
		}
		switch {
		case r.desc != "":
			if r.status == statusFailure && n < maxErrors {
				msgs = append(msgs, r.desc)
				n += len(r.desc)
			}
			continue
		case r.status == statusIdle:
			return strings.Join(msgs, "; "), nil
		}
		select {
		case <-ctx.Done():
			return strings.Join(msgs, "; "), fmt.Errorf("waiting for SWUpdate to be idle: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond): // SWUpdate's cleanup after the install
		}
	}
}

func (d *Driver) record() error {
	boot, err := firmware.BootID(d.BootIDFile)
	if err != nil {
		return fmt.Errorf("swupdate: installed, but %w", err)
	}
	rec := firmware.Record{Driver: Name, Slot: strings.Trim(d.SoftwareSet+","+d.RunningMode, ","), BootID: boot, Time: time.Now().UTC()}
	if err := firmware.SaveRecord(d.StateDir, rec); err != nil {
		return fmt.Errorf("swupdate: installed, but %w", err)
	}
	return nil
}

// The update states (include/state.h's update_state_t).
const (
	stateOK        = '0'
	stateInstalled = '1'
	stateTesting   = '2'
	stateFailed    = '3'
)

// Booted implements firmware.Driver: the bootloader's ustate, read
// through SWUpdate.
func (d *Driver) Booted(ctx context.Context) (firmware.BootState, error) {
	r, err := d.ask(ctx, d.layout.request(getUpdateState, 0, "", "", ""))
	if err != nil {
		return firmware.BootState{}, err
	}
	if r.typ != ack {
		return firmware.BootState{}, errors.New("swupdate: reading the update state: refused")
	}
	var state byte
	if r.msg != "" {
		state = r.msg[0]
	}
	rec, bootID, err := firmware.ThisBoot(d.StateDir, Name, d.BootIDFile)
	if err != nil {
		return firmware.BootState{}, err
	}
	return bootState(state, rec, bootID), nil
}

func bootState(state byte, rec *firmware.Record, bootID string) firmware.BootState {
	st := firmware.BootState{}
	if rec != nil {
		st.Slot = rec.Slot
	}
	switch {
	case rec != nil && rec.BootID == bootID:
		st.AwaitingReboot = true
	case state == stateInstalled || state == stateTesting:
		st.Pending = true
	case state == stateFailed:
		st.FellBack = true
	}
	return st
}

// MarkGood implements firmware.Driver: ustate 0.
func (d *Driver) MarkGood(ctx context.Context) error { return d.setState(ctx, stateOK) }

// MarkBad implements firmware.Driver: ustate 3 (failed).
func (d *Driver) MarkBad(ctx context.Context) error { return d.setState(ctx, stateFailed) }

func (d *Driver) setState(ctx context.Context, state byte) error {
	r, err := d.ask(ctx, d.layout.setState(state))
	if err != nil {
		return err
	}
	if r.typ != ack {
		return fmt.Errorf("swupdate: setting the update state to %c: refused (is a bootloader configured, swupdate -B?)", state)
	}
	return firmware.RemoveRecord(d.StateDir, Name)
}
