package main

import (
	"strings"
	"testing"
)

func emptySnapshot() snapshot {
	return snapshot{procs: map[string]process{}, mounts: map[string]mount{}, cgroups: map[string]bool{}, netns: map[string]bool{}}
}

// Only what is new and the tests' counts: what ran before the tests, and
// what else starts on the machine meanwhile, does not.
func TestLeaksAreNewAndTheTests(t *testing.T) {
	temp := []string{"/tmp"}
	before, after := emptySnapshot(), emptySnapshot()
	old := process{pid: 10, cmdline: []string{"containerd"}, exe: "/usr/bin/containerd", root: "/"}
	before.procs["10@1"], after.procs["10@1"] = old, old
	before.mounts["30 /tmp/old"], after.mounts["30 /tmp/old"] = mount{"/tmp/old", "tmpfs", "tmpfs"}, mount{"/tmp/old", "tmpfs", "tmpfs"}
	before.cgroups["/sys/fs/cgroup/memory/podvisor"], after.cgroups["/sys/fs/cgroup/memory/podvisor"] = true, true

	after.procs["11@5"] = process{pid: 11, cmdline: []string{"sleep", "1000"}, exe: "/bin/busybox", root: "/tmp/ctrd1/state/rootfs"}
	after.procs["12@5"] = process{pid: 12, cmdline: []string{"sh", "-c", "x", "tag"}, exe: "/bin/dash", root: "/", cgroups: []string{"/podvisor-e2e-9-x/pod1/main"}}
	after.procs["13@5"] = process{pid: 13, cmdline: []string{"/usr/sbin/sshd"}, exe: "/usr/sbin/sshd", root: "/", cwd: "/tmp"}
	// A user's sleep, its shell alive: not the tests'.
	after.procs["17@5"] = process{pid: 17, ppid: 10, cmdline: []string{"sleep", "45"}, exe: "/bin/sleep", root: "/"}
	after.procs["14@5"] = process{pid: 14, cmdline: []string{"bash"}, exe: "/bin/bash", root: "/", tokened: true}
	after.procs["10@9"] = process{pid: 10, cmdline: []string{"/tmp/podvisor-e2e1/podvisor", "run"}, exe: "/tmp/podvisor-e2e1/podvisor", root: "/"}
	after.mounts["31 /tmp/TestX/001/sandbox/p/shm"] = mount{"/tmp/TestX/001/sandbox/p/shm", "tmpfs", "shm"}
	after.mounts["32 /run/podvisor/netns/p"] = mount{"/run/podvisor/netns/p", "nsfs", "nsfs"}
	after.mounts["33 /mnt/usb"] = mount{"/mnt/usb", "vfat", "/dev/sdb1"}
	after.cgroups["/sys/fs/cgroup/cpu/podvisor-e2e-9-x"] = true
	// Another run's, on a shared machine: its test binary (pid 8) never
	// carried this run's token.
	after.cgroups["/sys/fs/cgroup/cpu/podvisor-e2e-8-x"] = true
	after.cgroups["/sys/fs/cgroup/cpu/podvisor-conformance-8-process"] = true
	after.procs["15@5"] = process{pid: 15, cmdline: []string{"sleep", "1000"}, exe: "/bin/sleep", root: "/", cgroups: []string{"/podvisor-e2e-8-x/pod2/main"}}
	// A child of a tokened process, whatever it runs.
	after.procs["16@5"] = process{pid: 16, ppid: 14, cmdline: []string{"cat"}, exe: "/bin/cat", root: "/"}
	after.netns["/run/netns/cni-1"] = true

	var got []string
	for _, l := range leaks(before, after, attribution{tempDirs: temp, pids: map[int]bool{9: true, 14: true}}) {
		got = append(got, l.kind+" "+l.what)
	}
	want := []string{
		`process 11 "sleep 1000"`, `process 12 "sh -c x tag"`, `process 14 "bash"`, `process 16 "cat"`, `process 10 "/tmp/podvisor-e2e1/podvisor run"`,
		"mount /tmp/TestX/001/sandbox/p/shm", "mount /run/podvisor/netns/p",
		"cgroup /sys/fs/cgroup/cpu/podvisor-e2e-9-x", "netns /run/netns/cni-1",
	}
	text := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%q not reported; got:\n%s", w, text)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d leaks, want %d (sshd in /tmp, a user's sleep, another run's cgroup and pod, the old containerd, the old mount and cgroup, /mnt/usb are not the tests'):\n%s", len(got), len(want), text)
	}
}

// On a shared machine, what is under another run's temporary directory,
// or merely looks like a test program, is not this run's.
func TestLeaksOnASharedMachine(t *testing.T) {
	before, after := emptySnapshot(), emptySnapshot()
	after.procs["20@1"] = process{pid: 20, cmdline: []string{"sleep", "3600"}, exe: "/bin/sleep", root: "/"}
	after.procs["21@1"] = process{pid: 21, cmdline: []string{"/tmp/podvisor-e2e7/podvisor-shim", "/tmp/TestOther1/001/data/c"}, exe: "/tmp/podvisor-e2e7/podvisor-shim", root: "/"}
	after.procs["22@1"] = process{pid: 22, cmdline: []string{"/tmp/podvisor-e2e5/podvisor-shim", "/tmp/TestMine1/001/data/c"}, exe: "/tmp/podvisor-e2e5/podvisor-shim", root: "/"}
	after.mounts["40 /tmp/TestOther1/001/shm"] = mount{"/tmp/TestOther1/001/shm", "tmpfs", "shm"}
	after.mounts["41 /tmp/TestMine1/001/net"] = mount{"/tmp/TestMine1/001/net", "nsfs", "nsfs"}
	mine := map[string]bool{}
	usedDirs(process{cmdline: []string{"/tmp/podvisor-e2e5/podvisor", "run", "--data-dir=/tmp/TestMine1/001/data"}, exe: "/tmp/podvisor-e2e5/podvisor"}, []string{"/tmp"}, mine)
	var got []string
	for _, l := range leaks(before, after, attribution{tempDirs: []string{"/tmp"}, pids: map[int]bool{}, shared: true, dirs: mine}) {
		got = append(got, l.kind+" "+l.what)
	}
	if text := strings.Join(got, "\n"); len(got) != 2 || !strings.Contains(text, "process 22 ") || !strings.Contains(text, "mount /tmp/TestMine1/001/net") {
		t.Fatalf("want only this run's shim and mount (dirs %v), got:\n%s", mine, text)
	}
}
