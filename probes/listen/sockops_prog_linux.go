package listen

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"
)

// releaseHint is the kind of sockReleaseProgram's events: a listener of
// the cgroup is being closed, which one is unknown. Never delivered.
const releaseHint Kind = 3

// Offsets in struct bpf_sock_ops and values from linux/bpf.h (stable
// UAPI: the program reads its context, never kernel structures, so it
// needs neither BTF nor CO-RE).
const (
	sockOpsOp        = 0  // op
	sockOpsArg0      = 4  // args[0]: the old state in BPF_SOCK_OPS_STATE_CB
	sockOpsFamily    = 20 // family
	sockOpsPort      = 68 // local_port, host byte order
	sockOpsCbFlags   = 84 // bpf_sock_ops_cb_flags
	opStateCB        = 10 // BPF_SOCK_OPS_STATE_CB
	opTCPListenCB    = 11 // BPF_SOCK_OPS_TCP_LISTEN_CB, kernel 4.20+
	stateCbFlag      = 1 << 2
	bpfSockFamily    = 4  // struct bpf_sock: family
	noPort           = -1 // bpf_sock's src_port is readable in post_bind programs only
	bpfSockState     = 72 // state
	bpfFCurrentCPU   = 0xffffffff
	progName         = "podvisor_listen" // BPF_OBJ_NAME_LEN is 16: 15 characters and a NUL
	progReleaseName  = "podvisor_close"
	progLicense      = "Dual MIT/GPL" // bpf_perf_event_output is GPL-only
	wireEventSize    = 40
	wireEventOnStack = -wireEventSize
)

// The event the program writes, native endian:
//
//	0  u64 watched cgroup id (an immediate: one program per cgroup)
//	8  u64 socket cookie
//	16 u64 network namespace cookie (0 without bpf_get_netns_cookie)
//	24 u32 local port
//	28 u32 family
//	32 u32 kind (Listening, Closed, releaseHint)
//	36 u32 zero

// output says where a program writes its events: the map's fd, and
// whether it is a ring buffer (bpf_ringbuf_output, 5.8+) or a perf event
// array (bpf_perf_event_output); netns says whether the program type may
// call bpf_get_netns_cookie.
type output struct {
	events  int
	ringbuf bool
	netns   bool
}

// sockOpsProgram is the sock_ops program for the cgroup with id cgroup.
//
// On listen(2) (BPF_SOCK_OPS_TCP_LISTEN_CB, which runs for every TCP
// socket of the cgroup without any flag) it reports Listening and turns
// on the state callback for that socket only; the state callback then
// reports the LISTEN → CLOSE transition as Closed. A socket accepted from
// the listener inherits the flag; its first state change turns it off,
// so an accepted connection costs one extra callback, not one per state
// change (measured on 6.18: 5 program runs per accepted and closed
// connection, 7 without the clearing). Every other op returns 1 (no
// opinion). The clearing touches only that flag, and only on sockets
// whose previous state was not LISTEN.
//
// A listener that predates the program never had the flag set: its
// close is seen by sockReleaseProgram.
func sockOpsProgram(cgroup uint64, out output) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, sockOpsOp, asm.Word),
		asm.JEq.Imm(asm.R2, opTCPListenCB, "listen"),
		asm.JEq.Imm(asm.R2, opStateCB, "state"),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),

		asm.LoadMem(asm.R2, asm.R6, sockOpsCbFlags, asm.Word).WithSymbol("listen"),
		asm.Or.Imm(asm.R2, stateCbFlag),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnSockOpsCbFlagsSet.Call(),
		asm.StoreImm(asm.R10, wireEventOnStack+32, int64(Listening), asm.Word),
		asm.Ja.Label("emit"),

		asm.LoadMem(asm.R2, asm.R6, sockOpsArg0, asm.Word).WithSymbol("state"),
		asm.JEq.Imm(asm.R2, tcpListen, "closed"),
		asm.LoadMem(asm.R2, asm.R6, sockOpsCbFlags, asm.Word),
		asm.And.Imm(asm.R2, ^int32(stateCbFlag)),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnSockOpsCbFlagsSet.Call(),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),

		asm.StoreImm(asm.R10, wireEventOnStack+32, int64(Closed), asm.Word).WithSymbol("closed"),
	}
	return append(insns, emit(cgroup, out, sockOpsPort, sockOpsFamily)...)
}

// sockReleaseProgram is the cgroup/sock_release program (kernel 5.9+)
// for the cgroup with id cgroup: it runs when a socket of the cgroup is
// released, before the protocol closes it, and for a TCP socket still in
// LISTEN it sends a release hint. It is there for the listeners that
// predate the sock_ops program (a restarted daemon's): nothing set their
// state callback, so nothing else sees them close.
//
// The hint names no socket. The program cannot read the port (bpf_sock's
// src_port is for post_bind programs), and measured on 6.18 the cookie
// bpf_get_socket_cookie gives here is not the one sock_ops and sock_diag
// give for the same listener. The watcher answers a hint with a
// sock_diag rescan of the cgroup, when it knows listeners from a dump.
func sockReleaseProgram(cgroup uint64, out output) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, bpfSockState, asm.Word),
		asm.JEq.Imm(asm.R2, tcpListen, "listener"),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),
		asm.StoreImm(asm.R10, wireEventOnStack+32, int64(releaseHint), asm.Word).WithSymbol("listener"),
	}
	return append(insns, emit(cgroup, out, noPort, bpfSockFamily)...)
}

// emit writes the event whose kind is already on the stack, with the
// context in R6, and returns 1.
func emit(cgroup uint64, out output, portOff, familyOff int16) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadImm(asm.R1, int64(cgroup), asm.DWord).WithSymbol("emit"),
		asm.StoreMem(asm.R10, wireEventOnStack, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.R10, wireEventOnStack+8, asm.R0, asm.DWord),
	}
	if out.netns {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.FnGetNetnsCookie.Call(),
			asm.StoreMem(asm.R10, wireEventOnStack+16, asm.R0, asm.DWord),
		)
	} else {
		insns = append(insns, asm.StoreImm(asm.R10, wireEventOnStack+16, 0, asm.DWord))
	}
	if portOff < 0 {
		insns = append(insns, asm.StoreImm(asm.R10, wireEventOnStack+24, 0, asm.Word))
	} else {
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R6, portOff, asm.Word),
			asm.StoreMem(asm.R10, wireEventOnStack+24, asm.R2, asm.Word))
	}
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.R6, familyOff, asm.Word),
		asm.StoreMem(asm.R10, wireEventOnStack+28, asm.R2, asm.Word),
		asm.StoreImm(asm.R10, wireEventOnStack+36, 0, asm.Word),
	)
	if out.ringbuf {
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, out.events),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, wireEventOnStack),
			asm.Mov.Imm(asm.R3, wireEventSize),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
		)
	} else {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, out.events),
			asm.LoadImm(asm.R3, bpfFCurrentCPU, asm.DWord),
			asm.Mov.Reg(asm.R4, asm.R10),
			asm.Add.Imm(asm.R4, wireEventOnStack),
			asm.Mov.Imm(asm.R5, wireEventSize),
			asm.FnPerfEventOutput.Call(),
		)
	}
	return append(insns, asm.Mov.Imm(asm.R0, 1), asm.Return())
}

// decodeWireEvent reads an event the program wrote.
func decodeWireEvent(b []byte) (Event, bool) {
	if len(b) < wireEventSize {
		return Event{}, false
	}
	ne := binary.NativeEndian
	k := Kind(ne.Uint32(b[32:]))
	if k != Listening && k != Closed && k != releaseHint {
		return Event{}, false
	}
	return Event{
		Kind:   k,
		Cgroup: ne.Uint64(b[0:]),
		Socket: ne.Uint64(b[8:]),
		NetNS:  ne.Uint64(b[16:]),
		Port:   uint16(ne.Uint32(b[24:])),
		Family: uint16(ne.Uint32(b[28:])),
	}, true
}
