// Package bpfcgroup attaches podvisor's eBPF programs to cgroup2
// directories the way both of its eBPF probes need: with a bpf_link where
// the kernel has one, with BPF_PROG_ATTACH before 5.7 (or in tests), and
// detaching what a killed podvisor left attached the old way. It also
// holds the feature-probe bookkeeping both probes share.
package bpfcgroup
