package swupdate

import (
	"encoding/binary"
	"runtime"
	"unsafe"
)

// The wire structs of SWUpdate's IPC (include/network_ipc.h,
// progress_ipc.h and swupdate_status.h of SWUpdate 2022.12, Debian 12's):
// C structs written raw, in the host's alignment and byte order (little
// endian here, as on every architecture podvisor ships for). Their size
// depends on the ABI (size_t, the alignment of a 64-bit integer); the
// server reads exactly sizeof(ipc_message) in one read and drops anything
// else, so the sizes must match to the byte.

// ipcMagic is IPC_MAGIC.
const ipcMagic = 0x14052001

// msgtype values.
const (
	reqInstall     = 0
	ack            = 1
	nack           = 2
	getStatus      = 3
	setUpdateState = 7
	getUpdateState = 8
)

// RECOVERY_STATUS values.
const (
	statusIdle     = 0
	statusStart    = 1
	statusRun      = 2
	statusSuccess  = 3
	statusFailure  = 4
	statusDownload = 5
	statusDone     = 6
	statusProgress = 8
)

// sourceLocal is SOURCE_LOCAL: the bundle comes from a local client.
const sourceLocal = 4

// apiVersion is SWUPDATE_API_VERSION of struct swupdate_request.
const apiVersion = 1

// layout is where the C compiler puts the fields on one ABI.
type layout struct {
	sizeT    int // sizeof(size_t)
	u64Align int // alignof(unsigned long long) inside a struct
}

// hostLayout is the running ABI's: LP64 on 64-bit Linux; ILP32 with
// 8-byte aligned long long (ARM EABI, MIPS o32), except i386's 4.
func hostLayout() layout {
	l := layout{sizeT: int(unsafe.Sizeof(uintptr(0))), u64Align: 8}
	if runtime.GOARCH == "386" {
		l.u64Align = 4
	}
	return l
}

func align(n, a int) int { return (n + a - 1) / a * a }

// ipcOffsets are the offsets in ipc_message (data starts at 8: both its
// int fields come first and the union is at most size_t-aligned).
type ipcOffsets struct {
	reqLen, info, softwareSet, runningMode, size int
}

func (l layout) ipc() ipcOffsets {
	const data = 8
	reqLen := align(12, l.sizeT) // after apiversion, source, dry_run
	info := reqLen + l.sizeT
	set := info + 512
	mode := set + 256
	reqSize := align(mode+256+1, l.sizeT)  // + bool disable_store_swu
	inst := align(reqSize+4+2048, l.sizeT) // + unsigned len, char buf[2048]
	return ipcOffsets{reqLen: data + reqLen, info: data + info, softwareSet: data + set, runningMode: data + mode,
		size: data + max(inst, 4+4+4+4+2048)} // procmsg, the next largest member
}

// progressOffsets are the offsets in struct progress_msg.
type progressOffsets struct {
	status, dwlPercent, nsteps, curStep, curPercent, curImage, hndName, info, infoLen, size int
}

func (l layout) progress() progressOffsets {
	dwlBytes := align(12, l.u64Align)
	p := progressOffsets{status: 4, dwlPercent: 8, nsteps: dwlBytes + 8}
	p.curStep = p.nsteps + 4
	p.curPercent = p.curStep + 4
	p.curImage = p.curPercent + 4
	p.hndName = p.curImage + 256
	p.infoLen = p.hndName + 64 + 4 // after sourcetype source
	p.info = p.infoLen + 4
	p.size = align(p.info+2048, l.u64Align)
	return p
}

var le = binary.LittleEndian

// request is an ipc_message of type typ; for REQ_INSTALL, size is the
// bundle's and software set and mode select what to install.
func (l layout) request(typ uint32, size int64, info, set, mode string) []byte {
	o := l.ipc()
	b := make([]byte, o.size)
	le.PutUint32(b[0:], ipcMagic)
	le.PutUint32(b[4:], typ)
	if typ == reqInstall {
		le.PutUint32(b[8:], apiVersion)
		le.PutUint32(b[12:], sourceLocal)
		// dry_run 0: RUN_DEFAULT, as SWUpdate was started.
		if l.sizeT == 8 {
			le.PutUint64(b[o.reqLen:], uint64(size))
		} else {
			le.PutUint32(b[o.reqLen:], uint32(size))
		}
		copy(b[o.info:o.info+511], info)
		copy(b[o.softwareSet:o.softwareSet+255], set)
		copy(b[o.runningMode:o.runningMode+255], mode)
	}
	return b
}

// setState is a SET_UPDATE_STATE message: its value is an
// update_state_t, an enum whose values are the characters '0'…'7'.
func (l layout) setState(state byte) []byte {
	b := l.request(setUpdateState, 0, "", "", "")
	le.PutUint32(b[8:], uint32(state))
	return b
}

// reply is the parts of an ipc_message answer podvisor reads.
type reply struct {
	typ uint32
	// msg is data.msg, the text of a NACK, or GET_UPDATE_STATE's state
	// in its first byte.
	msg string
	// status, lastResult, errCode and desc are GET_STATUS's.
	status, lastResult, errCode uint32
	desc                        string
}

func (l layout) parseReply(b []byte) reply {
	return reply{typ: le.Uint32(b[4:]), msg: cString(b[8 : 8+128]),
		status: le.Uint32(b[8:]), lastResult: le.Uint32(b[12:]), errCode: le.Uint32(b[16:]), desc: cString(b[20 : 20+2048])}
}

// progressMsg is a progress_msg.
type progressMsg struct {
	status, dwlPercent, nsteps, curStep, curPercent uint32
	image, handler, info                            string
}

func (l layout) parseProgress(b []byte) progressMsg {
	o := l.progress()
	n := min(int(le.Uint32(b[o.infoLen:])), 2048)
	return progressMsg{status: le.Uint32(b[o.status:]), dwlPercent: le.Uint32(b[o.dwlPercent:]),
		nsteps: le.Uint32(b[o.nsteps:]), curStep: le.Uint32(b[o.curStep:]), curPercent: le.Uint32(b[o.curPercent:]),
		image: cString(b[o.curImage : o.curImage+256]), handler: cString(b[o.hndName : o.hndName+64]),
		info: cString(b[o.info : o.info+n])}
}

// percent is the whole install's progress, as swupdate-progress computes
// it: the steps done plus the current step's share.
func (m progressMsg) percent() int {
	switch m.status {
	case statusSuccess, statusDone:
		return 100
	case statusDownload:
		return 0
	}
	if m.nsteps == 0 {
		return 0
	}
	step := min(max(int(m.curStep), 1), int(m.nsteps))
	p := ((step-1)*100 + min(int(m.curPercent), 100)) / int(m.nsteps)
	return min(p, 99) // 100 only when SWUpdate says it succeeded
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
