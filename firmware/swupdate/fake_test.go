package swupdate

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/firmware"
)

// fakeSWUpdate answers each control connection with reply(request); its
// progress socket accepts and stays silent.
func fakeSWUpdate(t *testing.T, reply func(req []byte) []byte) *Driver {
	t.Helper()
	dir := t.TempDir()
	l := hostLayout()
	ctrl, err := net.Listen("unix", filepath.Join(dir, "ctrl"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := net.Listen("unix", filepath.Join(dir, "prog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close(); prog.Close() })
	go func() {
		for {
			c, err := prog.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	go func() {
		for {
			c, err := ctrl.Accept()
			if err != nil {
				return
			}
			req := make([]byte, l.ipc().size)
			if _, err := io.ReadFull(c, req); err == nil {
				c.Write(reply(req))
			}
			c.Close()
		}
	}()
	d := New(filepath.Join(dir, "ctrl"), filepath.Join(dir, "prog"), filepath.Join(dir, "state"))
	boot := filepath.Join(dir, "boot_id")
	os.WriteFile(boot, []byte("boot-1\n"), 0o600)
	d.BootIDFile = boot
	return d
}

func answer(typ uint32, msg string) func([]byte) []byte {
	return func(req []byte) []byte {
		b := make([]byte, len(req))
		copy(b, req[:4])
		le.PutUint32(b[4:], typ)
		copy(b[8:], msg)
		return b
	}
}

// SWUpdate busy with another install: its NACK's text is the error.
func TestInstallRefused(t *testing.T) {
	d := fakeSWUpdate(t, answer(nack, "Installation in progress"))
	swu := filepath.Join(t.TempDir(), "x.swu")
	os.WriteFile(swu, []byte("070702"), 0o600)
	err := d.Install(context.Background(), swu, nil)
	if err == nil || !strings.Contains(err.Error(), "Installation in progress") {
		t.Fatalf("err %v", err)
	}
	if err := d.Install(context.Background(), filepath.Join(t.TempDir(), "none.swu"), nil); err == nil || !strings.Contains(err.Error(), "none.swu") {
		t.Errorf("missing .swu: %v", err)
	}
}

func TestNotRunning(t *testing.T) {
	d := New(filepath.Join(t.TempDir(), "nosock"), "", t.TempDir())
	if _, err := d.Booted(context.Background()); err == nil || !strings.Contains(err.Error(), "is SWUpdate running?") {
		t.Errorf("err %v", err)
	}
}

// The update state travels as SWUpdate's suricatta sends it: one
// update_state_t, its value the character.
func TestUpdateState(t *testing.T) {
	var got []byte
	d := fakeSWUpdate(t, func(req []byte) []byte {
		switch le.Uint32(req[4:]) {
		case getUpdateState:
			return answer(ack, "2")(req)
		case setUpdateState:
			got = append(got, req[8])
			return answer(ack, "")(req)
		}
		return answer(nack, "")(req)
	})
	st, err := d.Booted(context.Background())
	if err != nil || !st.Pending {
		t.Fatalf("%+v %v, want pending (ustate 2)", st, err)
	}
	if err := d.MarkGood(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.MarkBad(context.Background()); err != nil {
		t.Fatal(err)
	}
	if string(got) != "03" {
		t.Errorf("states set %q, want 0 then 3", got)
	}
	d2 := fakeSWUpdate(t, answer(nack, ""))
	if err := d2.MarkGood(context.Background()); err == nil || !strings.Contains(err.Error(), "swupdate -B") {
		t.Errorf("refused state: %v", err)
	}
	var _ firmware.Driver = d
}
