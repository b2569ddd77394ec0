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
//     run). Fixed: both sides try a refused subscription again, 1 s
//     doubling to 30 s (throttle.Retry); no subscription stayed refused
//     in the runs since.
//   - Twice (10 and 6 devices), devices stayed NotReady for 5 min after a
//     clean start, with no refusal logged on their side: all owned by the
//     first replica, all connected before that replica's first
//     subscription; their online presence (retained) was never stored,
//     their heartbeats were. Two causes found in the code, both fixed
//     (not seen in the 4 runs since that got past the start): replicas starting
//     together each saw no other at their join and each forgot the
//     presence when its hub started, the later one after the first had
//     stored it (reproduced by sync/hub's
//     TestAReplicaStartingNeverForgetsThePresenceALiveReplicaStored; the
//     forget is now decided before the join, atomically with the others'
//     joins: fleetdb.Fleet.ForgetPresenceAlone); and a gain soon after
//     the connection narrowed the link's retained filter to the gained
//     buckets while the connection's own retained deliveries could still
//     be coming (devicelink keeps it open for 30 s).
//   - Once, one device kept 2 statuses without a receipt for 2.5 min
//     while connected, with no resend logged (outbox: sent up to 5,
//     receipted up to 3): not explained yet (a failure's explanation now
//     logs what the store holds and the replicas' lines naming it).
//   - A heartbeat sent while its device's bucket moved was dropped by
//     both replicas: the gaining one had none until the next period. A
//     device now answers the new hub session a gain announces with a
//     heartbeat within 2 s (sync/uplink, jittered).
//   - At a load average of 20 and more (another NATS test beside it), the
//     NATS nodes time out loading the MQTT sessions' JetStream records at
//     the connection storm ("unable to connect: loading session record …
//     timeout"): no device stays connected and none is Ready.
package failover
