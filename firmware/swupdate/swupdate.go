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
// its own (SWUpdate closes it after answering), within askTimeout.
func (d *Driver) ask(ctx context.Context, msg []byte) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
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

// The bounds of Install's waits besides the caller's context.
const (
	// askTimeout bounds one control exchange, the install request's ACK
	// included: SWUpdate's network thread answers at once.
	askTimeout = 30 * time.Second
	// pollMax is the longest pause between GET_STATUS polls.
	pollMax = time.Second
)

// startTimeout bounds how long SWUpdate may take to show the install on
// GET_STATUS once the .swu was streamed (or it stopped reading); a
// variable for the tests.
var startTimeout = 60 * time.Second

// maxErrors bounds what Install reports of SWUpdate's messages.
const maxErrors = 1024

// Install implements firmware.Driver: the .swu is streamed to SWUpdate,
// which verifies it (signature, hashes, hardware compatibility) and
// installs it with its handlers. The progress socket gives the
// percentages; the outcome is GET_STATUS's (status.go), polled once the
// stream ended or the progress socket said the install ended, so a
// progress message missed never leaves Install waiting.
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
	// Listen to progress before starting, not to miss the first steps
	// (SWUpdate registers the connection when its thread gets to it).
	prog, err := dial(ctx, find(d.Progress, ProgressPaths), "progress")
	if err != nil {
		return err
	}
	defer prog.Close()
	stop := context.AfterFunc(ctx, func() { prog.SetDeadline(time.Now()) })
	defer stop()

	ctrl, err := d.requestInstall(ctx, fi.Size(), bundle)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	stopCtrl := context.AfterFunc(ctx, func() { ctrl.SetDeadline(time.Now()) })
	defer stopCtrl()
	// SWUpdate reads the stream as it installs; on a bad .swu it stops
	// reading and closes the connection.
	streamed := make(chan error, 1)
	go func() {
		_, err := io.Copy(ctrl, f)
		ctrl.Close()
		streamed <- err
	}()
	msgs := make(chan progressMsg)
	done := make(chan struct{})
	defer close(done)
	go d.readProgress(prog, msgs, done)

	var (
		w         watch
		serr      error
		info      string // the end's progress message's text
		last      = -1
		poll      *time.Timer // nil until the install may have ended
		pause     time.Duration
		pollSince time.Time
	)
	startPolling := func() {
		if poll == nil {
			poll, pollSince = time.NewTimer(0), time.Now()
		}
	}
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		var tick <-chan time.Time
		if poll != nil {
			tick = poll.C
		}
		select {
		case m, ok := <-msgs:
			if !ok { // the progress socket closed: GET_STATUS says why
				msgs = nil
				startPolling()
				continue
			}
			if p := m.percent(); p > last && progress != nil {
				last = p
				progress(firmware.Progress{Percent: p, Message: strings.TrimSpace(m.image + " " + m.handler)})
			}
			if m.status == statusSuccess || m.status == statusFailure {
				info = m.info // START's is the request's own, not a reason
				startPolling()
			}
		case serr = <-streamed:
			streamed = nil
			startPolling()
		case <-tick:
			if err := d.pollStatus(ctx, &w); err != nil {
				return fmt.Errorf("swupdate: install of %s: %w", bundle, err)
			}
			if w.done {
				return d.outcome(bundle, w, info, serr, last, progress)
			}
			if !w.started && time.Since(pollSince) > startTimeout {
				return fmt.Errorf("swupdate: install of %s: SWUpdate did not start it within %v of the stream's end", bundle, startTimeout)
			}
			pause = min(max(2*pause, 10*time.Millisecond), pollMax)
			poll.Reset(pause)
		case <-ctx.Done():
			return fmt.Errorf("swupdate: stopped waiting for the install of %s: %w", bundle, ctx.Err())
		}
	}
}

// requestInstall sends REQ_INSTALL on a new control connection and reads
// the ACK within askTimeout; the connection then takes the .swu.
func (d *Driver) requestInstall(ctx context.Context, size int64, bundle string) (net.Conn, error) {
	ctrl, err := dial(ctx, find(d.Control, ControlPaths), "control")
	if err != nil {
		return nil, err
	}
	req := d.layout.request(reqInstall, size, "podvisor", d.SoftwareSet, d.RunningMode)
	ackBy := time.Now().Add(askTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(ackBy) {
		ackBy = dl
	}
	ctrl.SetDeadline(ackBy)
	if _, err := ctrl.Write(req); err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("swupdate: control socket: %w", err)
	}
	ans := make([]byte, len(req))
	if _, err := io.ReadFull(ctrl, ans); err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("swupdate: control socket: reading the answer to the install request: %w", err)
	}
	if r := d.layout.parseReply(ans); r.typ != ack {
		ctrl.Close()
		why := r.msg
		if why == "" {
			why = "refused (a software set or mode it does not accept, or another API version)"
		}
		return nil, fmt.Errorf("swupdate: install of %s: %s", bundle, why)
	}
	// The stream is bounded by the caller's context only: an install
	// takes as long as the image needs.
	dl, _ := ctx.Deadline()
	ctrl.SetDeadline(dl)
	return ctrl, nil
}

// readProgress sends the progress socket's messages to msgs until it
// closes (or Install returned: done), then closes msgs.
func (d *Driver) readProgress(prog net.Conn, msgs chan<- progressMsg, done <-chan struct{}) {
	defer close(msgs)
	buf := make([]byte, d.layout.progress().size)
	for {
		if _, err := io.ReadFull(prog, buf); err != nil {
			return
		}
		select {
		case msgs <- d.layout.parseProgress(buf):
		case <-done:
			return
		}
	}
}

// pollStatus asks GET_STATUS until no notification is left queued.
func (d *Driver) pollStatus(ctx context.Context, w *watch) error {
	for {
		r, err := d.ask(ctx, d.layout.request(getStatus, 0, "", "", ""))
		if err != nil {
			return fmt.Errorf("asking SWUpdate for the install's status: %w", err)
		}
		if !w.observe(r) {
			return nil
		}
	}
}

// outcome is the error of an ended install (nil: installed, recorded).
func (d *Driver) outcome(bundle string, w watch, info string, serr error, last int, progress func(firmware.Progress)) error {
	if w.result == statusSuccess {
		if last < 100 && progress != nil { // the progress socket missed the end
			progress(firmware.Progress{Percent: 100})
		}
		return d.record()
	}
	why := w.why()
	if why == "" {
		why = info
	}
	if why == "" && serr != nil {
		why = serr.Error()
	}
	if why == "" {
		why = fmt.Sprintf("SWUpdate's last result is %d", w.result)
	}
	return fmt.Errorf("swupdate: install of %s failed: %s", bundle, why)
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
