// Package bpftest holds what the tests of podvisor's eBPF probes
// (probes/listen, probes/netcount) and the e2e tests share: throw-away
// cgroups, child processes, and counting the BPF programs and maps in the kernel that nobody holds.
// It imports no podvisor package, so that the probes' in-package tests
// can use it.
package bpftest
