// Package failover is the fleet's failover test: three NATS nodes
// (test/natstest), one PostgreSQL (test/pgtest), three real podhub serve
// replicas, simulated devices (test/simfleet) streaming pod statuses and
// two real podvisor daemons running process pods; a NATS node and the
// leading replica are killed with SIGKILL in the middle of the stream and
// of an apply, then restarted. Its tests only.
//
// Known failures (November 2026, 200 devices, eight runs after the
// owners work was merged: one passed). The test fails because of what it
// was written to find, not its own timing:
//
//   - NATS 2.9 answers a SUBSCRIBE with SUBACK 0x80 when it cannot make
//     the session's JetStream consumer within its 4 s ("Unable to add
//     JetStream consumer … timeout" in its log), at a connection storm or
//     after a node's loss, even at a load average of 1 to 3. The device's
//     agent (sync/uplink) and the hub (sync/hub/devicelink) read it as an
//     ACL's refusal and stay connected without the subscription: a device
//     whose desired subscription was refused never gets a document (the
//     hub's catch-up publishes it again into the void) until it
//     reconnects and is lucky, and a replica whose +/presence (or
//     +/status) subscription was refused leaves every device it owns
//     NotReady (or its statuses unstored) until its next connection.
//     Failing runs: 1 to 62 devices never acknowledged the DaemonSet's
//     generation (their desired subscription refused, three runs); 71
//     devices NotReady at start (their owner's +/presence refused, one
//     run). The fix is a retry of a refused subscription (or a
//     reconnection) on both sides: with a retry in sync/uplink (tried,
//     not committed) no device's subscription stayed refused.
//   - Twice (10 and 6 devices), devices stayed NotReady for 5 min after a
//     clean start, with no refusal logged on their side: all owned by the
//     first replica (which took the 1,024 buckets at its start, released
//     682 a second later, and connected to the broker after them), all
//     connected before that replica's first subscription; their online
//     presence (retained) was never stored, their heartbeats were. Either
//     NATS did not deliver the retained message at that subscription or
//     the link's retained filter dropped it: not found yet.
//   - Once, one device kept 2 statuses without a receipt for 2.5 min
//     while connected, with no resend logged (outbox: sent up to 5,
//     receipted up to 3): not explained yet.
package failover
