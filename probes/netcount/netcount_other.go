//go:build !linux

package netcount

import "errors"

var errNotLinux = errors.New("network counters need Linux (cgroup_skb programs, veth statistics)")

// Counter counts pods' traffic; off Linux it never opens.
type Counter struct{}

// Open fails: there is nothing to count with.
func Open(Options) (*Counter, error) { return nil, errNotLinux }

// Watch fails.
func (*Counter) Watch(string) (uint64, error) { return 0, errNotLinux }

// Read fails.
func (*Counter) Read(uint64) (Counters, error) { return Counters{}, errNotLinux }

// Unwatch fails.
func (*Counter) Unwatch(uint64) error { return errNotLinux }

// Close does nothing.
func (*Counter) Close() error { return nil }

// HostVeth fails.
func HostVeth(string) (string, error) { return "", errNotLinux }

// ReadVeth fails.
func ReadVeth(string) (Counters, error) { return Counters{}, errNotLinux }
