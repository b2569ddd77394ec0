// Package netns runs a piece of work inside another network namespace
// (a netlink socket, a link dump: they see the namespace they were made
// in) on an OS thread of its own, for podvisor's network probes.
package netns
