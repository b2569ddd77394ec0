package swupdate

import (
	"testing"

	"github.com/podvisor/podvisor/firmware"
)

// The offsets gcc gives the structs of Debian 12's libswupdate-dev
// (2022.12) headers on amd64 and arm64 (LP64) and on armv7
// (arm-linux-gnueabihf-gcc 12); i386's follow the same rules, unchecked.
func TestLayout(t *testing.T) {
	lp64 := layout{sizeT: 8, u64Align: 8}
	if got, want := lp64.ipc(), (ipcOffsets{reqLen: 24, info: 32, softwareSet: 544, runningMode: 800, size: 3120}); got != want {
		t.Errorf("LP64 ipc_message %+v, want %+v", got, want)
	}
	if got, want := lp64.progress(), (progressOffsets{status: 4, dwlPercent: 8, nsteps: 24, curStep: 28, curPercent: 32,
		curImage: 36, hndName: 292, infoLen: 360, info: 364, size: 2416}); got != want {
		t.Errorf("LP64 progress_msg %+v, want %+v", got, want)
	}
	arm := layout{sizeT: 4, u64Align: 8}
	if got, want := arm.ipc(), (ipcOffsets{reqLen: 20, info: 24, softwareSet: 536, runningMode: 792, size: 3104}); got != want {
		t.Errorf("armv7 ipc_message %+v, want %+v", got, want)
	}
	if got := arm.progress(); got.nsteps != 24 || got.infoLen != 360 || got.info != 364 || got.size != 2416 {
		t.Errorf("armv7 progress_msg %+v, want nsteps 24, infolen 360, info 364, 2416 bytes", got)
	}
	if got := (layout{sizeT: 4, u64Align: 4}).progress().size; got != 2408 {
		t.Errorf("i386 progress_msg is %d bytes, want 2408", got)
	}
}

func TestRequest(t *testing.T) {
	l := layout{sizeT: 8, u64Align: 8}
	b := l.request(reqInstall, 0x1_0000_0001, "podvisor", "stable", "copy2")
	if len(b) != 3120 || le.Uint32(b) != ipcMagic || le.Uint32(b[4:]) != reqInstall {
		t.Fatalf("header %x", b[:8])
	}
	if le.Uint32(b[8:]) != apiVersion || le.Uint32(b[12:]) != sourceLocal || le.Uint64(b[24:]) != 0x1_0000_0001 {
		t.Errorf("request %x", b[8:32])
	}
	if cString(b[32:]) != "podvisor" || cString(b[544:]) != "stable" || cString(b[800:]) != "copy2" {
		t.Errorf("strings %q %q %q", cString(b[32:]), cString(b[544:]), cString(b[800:]))
	}
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'x'
	}
	b = l.request(reqInstall, 1, string(long), string(long), "")
	if n := len(cString(b[32:544])); n != 511 {
		t.Errorf("info of %d bytes, want 511 and a NUL", n)
	}
	s := l.setState('0')
	if le.Uint32(s[4:]) != setUpdateState || le.Uint32(s[8:]) != '0' {
		t.Errorf("SET_UPDATE_STATE %x", s[:12])
	}
}

func TestParse(t *testing.T) {
	l := layout{sizeT: 8, u64Align: 8}
	b := make([]byte, 3120)
	le.PutUint32(b[4:], nack)
	copy(b[8:], "Installation in progress")
	if r := l.parseReply(b); r.typ != nack || r.msg != "Installation in progress" {
		t.Errorf("%+v", r)
	}
	p := make([]byte, 2416)
	le.PutUint32(p[4:], statusRun)
	le.PutUint32(p[24:], 4) // nsteps
	le.PutUint32(p[28:], 3) // cur_step
	le.PutUint32(p[32:], 50)
	copy(p[36:], "rootfs.img")
	copy(p[292:], "raw")
	le.PutUint32(p[360:], 99999) // a bad infolen is bounded
	m := l.parseProgress(p)
	if m.image != "rootfs.img" || m.handler != "raw" || m.percent() != 62 {
		t.Errorf("%+v: %d%%", m, m.percent())
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		m    progressMsg
		want int
	}{
		{progressMsg{status: statusStart}, 0},
		{progressMsg{status: statusRun, nsteps: 1, curStep: 1, curPercent: 100}, 99},
		{progressMsg{status: statusRun, nsteps: 2, curStep: 2, curPercent: 0}, 50},
		{progressMsg{status: statusRun, nsteps: 2, curStep: 9, curPercent: 500}, 99},
		{progressMsg{status: statusSuccess}, 100},
		{progressMsg{status: statusFailure, nsteps: 2, curStep: 1, curPercent: 40}, 20},
	} {
		if got := tc.m.percent(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.m, got, tc.want)
		}
	}
}

func TestBootState(t *testing.T) {
	rec := &firmware.Record{Driver: Name, BootID: "boot-1"}
	for _, tc := range []struct {
		state  byte
		rec    *firmware.Record
		bootID string
		want   firmware.BootState
	}{
		{'0', nil, "boot-1", firmware.BootState{}},
		{'4', nil, "boot-1", firmware.BootState{}}, // no ustate at all
		{'1', rec, "boot-1", firmware.BootState{AwaitingReboot: true}},
		{'1', rec, "boot-2", firmware.BootState{Pending: true}},
		{'2', nil, "boot-2", firmware.BootState{Pending: true}}, // installed by another client
		{'3', nil, "boot-2", firmware.BootState{FellBack: true}},
	} {
		if got := bootState(tc.state, tc.rec, tc.bootID); got != tc.want {
			t.Errorf("ustate %c, record %v, boot %s: %+v, want %+v", tc.state, tc.rec, tc.bootID, got, tc.want)
		}
	}
}
