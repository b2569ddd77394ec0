// Package failover is the fleet's failover test: three NATS nodes
// (test/natstest), one PostgreSQL (test/pgtest), three real podhub serve
// replicas, thousands of simulated devices (test/simfleet) streaming pod
// statuses and two real podvisor daemons running process pods; a NATS
// node and the leading replica are killed with SIGKILL in the middle of
// the stream and of an apply, then restarted. Its tests only.
package failover
