package swupdate

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/firmware"
)

// note is one queued notification of the fake daemon.
type note struct {
	status uint32
	msg    string
}

// fakeDaemon is SWUpdate's control socket as core/network_thread.c answers
// it: REQ_INSTALL is ACKed when idle (the notification queue emptied),
// the .swu read from the same connection; GET_STATUS pops the oldest
// notification or answers the installer's status, with last_install. Its
// progress socket accepts and never sends anything: every progress
// message is missed, as when SWUpdate registers the connection too late.
type fakeDaemon struct {
	mu         sync.Mutex
	status     uint32
	lastResult uint32
	queue      []note
	// idlePolls is how many GET_STATUS the installer takes to wake up
	// after the stream ended: until then the status is IDLE and
	// last_install the previous install's.
	idlePolls int
	// install runs the install once its stream was read (n bytes): it
	// returns the notifications and the result.
	install func(n int64) ([]note, uint32)
	// readLimit: the installer stops reading (and closes) after this
	// many bytes, as SWUpdate does on a bad .swu; 0 reads to the end.
	readLimit int64
	read      *int64 // set once the stream was read
	streamed  chan int64
}

func startFake(t *testing.T, f *fakeDaemon) *Driver {
	t.Helper()
	dir := t.TempDir()
	ctrl, err := net.Listen("unix", filepath.Join(dir, "ctrl"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := net.Listen("unix", filepath.Join(dir, "prog"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ctrl.Close(); prog.Close(); wg.Wait() })
	var conns []net.Conn
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := prog.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	f.streamed = make(chan int64, 1)
	go func() {
		defer wg.Done()
		for {
			c, err := ctrl.Accept()
			if err != nil {
				return
			}
			f.serve(c)
		}
	}()
	d := New(filepath.Join(dir, "ctrl"), filepath.Join(dir, "prog"), filepath.Join(dir, "state"))
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte("boot-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.BootIDFile = boot
	return d
}

func (f *fakeDaemon) serve(c net.Conn) {
	l := hostLayout()
	req := make([]byte, l.ipc().size)
	if _, err := io.ReadFull(c, req); err != nil {
		c.Close()
		return
	}
	ans := make([]byte, len(req))
	copy(ans, req[:4])
	f.mu.Lock()
	defer f.mu.Unlock()
	switch le.Uint32(req[4:]) {
	case reqInstall:
		if f.status != statusIdle {
			le.PutUint32(ans[4:], nack)
			copy(ans[8:], "Installation in progress")
			break
		}
		le.PutUint32(ans[4:], ack)
		f.queue = nil
		c.Write(ans)
		// The installer reads the stream on its own thread.
		go func() {
			var r io.Reader = c
			if f.readLimit > 0 {
				r = io.LimitReader(c, f.readLimit)
			}
			n, _ := io.Copy(io.Discard, r)
			c.Close()
			f.streamed <- n
		}()
		return
	case getStatus:
		le.PutUint32(ans[4:], ack)
		select {
		case n := <-f.streamed:
			f.read = &n
		default:
		}
		if f.read != nil && f.install != nil {
			if f.idlePolls > 0 { // the installer has not woken up yet
				f.idlePolls--
			} else {
				notes, result := f.install(*f.read)
				f.install = nil
				f.lastResult = result
				f.queue = append(append(f.queue, notes...), note{statusIdle, "Waiting for requests..."})
			}
		}
		status := f.status
		if len(f.queue) > 0 {
			n := f.queue[0]
			f.queue = f.queue[1:]
			status = n.status
			copy(ans[20:20+2047], n.msg)
		}
		le.PutUint32(ans[8:], status)
		le.PutUint32(ans[12:], f.lastResult)
	default:
		le.PutUint32(ans[4:], nack)
	}
	c.Write(ans)
	c.Close()
}

func swuFile(t *testing.T, size int) string {
	p := filepath.Join(t.TempDir(), "x.swu")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A .swu that is not one: SWUpdate stops reading at once and fails; every
// progress message is missed. Install learns the failure and SWUpdate's
// messages from GET_STATUS, not from the previous install's IDLE and
// SUCCESS it answers before its installer woke up.
func TestInstallMissedProgressFailure(t *testing.T) {
	f := &fakeDaemon{lastResult: statusSuccess, idlePolls: 3, readLimit: 100}
	f.install = func(int64) ([]note, uint32) {
		return []note{
			{statusStart, "Software Update started !"},
			{statusRun, "Found cpio header"}, // a TRACE
			{statusFailure, "CPIO Format not recognized: magic not found"},
			{statusFailure, "Image invalid or corrupted. Not installing ..."},
		}, statusFailure
	}
	d := startFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := d.Install(ctx, swuFile(t, 1<<20), nil)
	if err == nil || !strings.Contains(err.Error(), "magic not found; Image invalid or corrupted") {
		t.Fatalf("install: %v, want the failure with SWUpdate's messages", err)
	}
}

// A good .swu, every progress message missed: installed, recorded, and
// the caller still sees 100 %.
func TestInstallMissedProgressSuccess(t *testing.T) {
	f := &fakeDaemon{lastResult: statusFailure, idlePolls: 2}
	var read int64
	f.install = func(n int64) ([]note, uint32) {
		read = n
		return []note{{statusStart, "Software Update started !"}, {statusSuccess, "SWUPDATE successful !"}}, statusSuccess
	}
	d := startFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var seen []int
	if err := d.Install(ctx, swuFile(t, 300<<10), func(p firmware.Progress) { seen = append(seen, p.Percent) }); err != nil {
		t.Fatal(err)
	}
	if read != 300<<10 {
		t.Errorf("SWUpdate read %d bytes of the .swu, want %d", read, 300<<10)
	}
	if len(seen) != 1 || seen[0] != 100 {
		t.Errorf("progress %v, want [100]", seen)
	}
	st, err := firmware.LoadRecord(d.StateDir, Name)
	if err != nil || st == nil || st.Driver != Name {
		t.Errorf("install record %+v %v", st, err)
	}
}

// SWUpdate ACKs and reads the stream but never shows the install: Install
// gives up after startTimeout instead of waiting for ever.
func TestInstallNeverStarted(t *testing.T) {
	defer func(t time.Duration) { startTimeout = t }(startTimeout)
	startTimeout = 50 * time.Millisecond
	d := startFake(t, &fakeDaemon{lastResult: statusSuccess})
	err := d.Install(context.Background(), swuFile(t, 1000), nil)
	if err == nil || !strings.Contains(err.Error(), "did not start it") {
		t.Fatalf("install: %v, want SWUpdate not starting it", err)
	}
}

// The fold of GET_STATUS replies, as network_thread.c answers them.
func TestWatch(t *testing.T) {
	idle := func(last uint32) reply { return reply{status: statusIdle, lastResult: last} }
	n := func(status uint32, desc string, last uint32) reply {
		return reply{status: status, desc: desc, lastResult: last}
	}
	for _, tc := range []struct {
		name    string
		replies []reply
		done    bool
		result  uint32
		why     string
	}{
		{"before the installer woke up: the previous result is not this one's",
			[]reply{idle(statusSuccess), idle(statusSuccess)}, false, 0, ""},
		{"failed, its messages kept",
			[]reply{idle(statusSuccess), n(statusStart, "started", statusSuccess), n(statusFailure, "HASH mismatch", statusFailure),
				n(statusFailure, "Installation failed !", statusFailure), n(statusIdle, "Waiting for requests...", statusFailure)},
			true, statusFailure, "HASH mismatch; Installation failed !"},
		{"succeeded", []reply{n(statusStart, "started", statusFailure), n(statusSuccess, "SWUPDATE successful !", statusSuccess),
			n(statusIdle, "Waiting for requests...", statusSuccess)}, true, statusSuccess, ""},
		{"the queue taken by another client: the status says it",
			[]reply{idle(statusFailure), {status: statusRun, lastResult: statusFailure}, idle(statusSuccess)}, true, statusSuccess, ""},
		{"still running", []reply{n(statusStart, "started", 0), {status: statusRun}}, false, 0, ""},
	} {
		var w watch
		for _, r := range tc.replies {
			w.observe(r)
		}
		if w.done != tc.done || w.result != tc.result || w.why() != tc.why {
			t.Errorf("%s: done %v result %d why %q, want %v %d %q", tc.name, w.done, w.result, w.why(), tc.done, tc.result, tc.why)
		}
	}
}
