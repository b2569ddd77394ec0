// Package replica is how several podhub processes (replicas) share one
// fleet store: each says it is alive in the store's replicas table, and
// one of them, the leader, holds the leader lease (the leases table) and
// does the work only one may do (scheduling passes, rollouts and
// updates, presence resets). The lease carries a fencing token that
// grows at every change of holder; the leader's placement writes carry
// it and are refused in their own transaction once it moved (Fence).
//
// Time: the lease's expiry is in the DATABASE's clock, read and written
// by the store's own statements (now() on PostgreSQL), never compared
// with a replica's clock. A leader counts its lease's life on its own
// monotonic clock from the moment it SENT the renewal (before the
// database stamped it), so it stops leading no later than the database
// deems the lease expired; a taker waits a further margin on the
// database's clock, for the two clocks' rates.
//
// This file is the pure core: the decisions, from the lease row read and
// the clocks, with no I/O (tested with a fake clock). store.go is its
// SQL on both dialects; elector.go runs it.
package replica

import (
	"fmt"
	"time"
)

// LeaderLease is the name of the leader's lease row.
const LeaderLease = "leader"

// Defaults of the lease's timing: renewed every Renew, valid TTL after
// each renewal, taken by another replica Margin after that.
const (
	DefaultTTL    = 15 * time.Second
	DefaultRenew  = 5 * time.Second
	DefaultMargin = 2 * time.Second
)

// Timing is how long a lease lasts and when it is renewed.
type Timing struct {
	// TTL is a lease's life after each renewal.
	TTL time.Duration
	// Renew is the period of renewals (and of the others' attempts to
	// take the lease): well under TTL, so that a renewal or two may fail
	// before the lease runs out.
	Renew time.Duration
	// Margin is how long past the expiry (on the database's clock)
	// another replica waits before it takes the lease.
	Margin time.Duration
}

// Check says what is wrong with t, if anything.
func (t Timing) Check() error {
	if t.TTL < time.Second || t.Renew <= 0 || t.Margin < 0 {
		return fmt.Errorf("lease timing %v/%v/%v: want a TTL of at least 1s and a positive renewal period", t.TTL, t.Renew, t.Margin)
	}
	if t.Renew*2 > t.TTL {
		return fmt.Errorf("lease timing: renewal every %v with a TTL of %v: want at least two renewals within the TTL", t.Renew, t.TTL)
	}
	return nil
}

// DefaultTiming is the lease timing podhub uses unless told otherwise.
var DefaultTiming = Timing{TTL: DefaultTTL, Renew: DefaultRenew, Margin: DefaultMargin}

// Self is a replica process as the lease and the replicas' rows know
// it: its ID (shown, named by podhub get replicas) and a nonce drawn at
// random by each process, so that two processes given one ID (a shared
// podhub.yaml, a cloned data directory) are two holders, never one: the
// lease's compare-and-set and the fence compare both.
type Self struct {
	ID    string
	Nonce string
}

// Lease is a lease row as stored: Expires in the database's clock,
// milliseconds since the epoch. An empty Holder is a released lease;
// Nonce is the holder process's (Self).
type Lease struct {
	Name    string
	Holder  string
	Nonce   string
	Token   int64
	Expires int64
}

// heldBy reports whether the row names the process me as its holder.
func (l *Lease) heldBy(me Self) bool { return l.Holder == me.ID && l.Nonce == me.Nonce }

// Action is what a replica does with the lease it read.
type Action int

const (
	// Wait: another replica holds the lease and it has not expired (by
	// the margin): nothing to write.
	Wait Action = iota
	// Create: there is no lease row yet; insert one with token 1.
	Create
	// Renew: the replica holds the lease; extend it, same token.
	Renew
	// Take: the lease is free (released or expired by the margin); take
	// it with the next token.
	Take
)

func (a Action) String() string {
	return [...]string{"wait", "create", "renew", "take"}[a]
}

// Decision is what Decide chose: the action, and the row to write
// (compare-and-set on the row read: holder, token and expiry unchanged).
type Decision struct {
	Action Action
	// Token is the token the replica holds after the write.
	Token int64
}

// Decide is what replica process me does with the lease row it read
// (nil: no row) at the database's time dbNow (milliseconds): renew its
// own, take a free or expired one, wait for another's. Its own is the
// one its ID AND nonce hold: another process with the same ID is
// another holder. A lease that lapsed while its holder was away
// (expired, not taken) is taken again with a new token even by the same
// holder: a new term, since its old term's work stopped when it lapsed
// (its own lease expired but within the margin: waited for, as
// another's).
func Decide(me Self, l *Lease, dbNow int64, t Timing) Decision {
	switch {
	case l == nil:
		return Decision{Action: Create, Token: 1}
	case l.heldBy(me) && dbNow < l.Expires:
		return Decision{Action: Renew, Token: l.Token}
	case l.Holder == "" || dbNow > l.Expires+t.Margin.Milliseconds():
		return Decision{Action: Take, Token: l.Token + 1}
	}
	return Decision{Action: Wait, Token: l.Token}
}

// Term is a replica's view of its own leadership on its monotonic
// clock: leading until the lease it last wrote may have expired.
type Term struct {
	// Token is the fencing token of the term (0: not leading).
	Token int64
	// Until is when the term ends unless renewed: the send time of the
	// last successful write plus the TTL.
	Until time.Time
}

// Leading reports whether the term still holds at now.
func (t Term) Leading(now time.Time) bool {
	return t.Token != 0 && now.Before(t.Until)
}

// After is the term after an attempt sent at sent (local clock, taken
// before the lease was read) ended in d, written reporting whether the
// compare-and-set wrote the row. A create, renewal or take that wrote
// starts or extends the term; anything else ends it (a renewal that lost
// the race to a taker, a lease seen held by another): the replica does
// not lead. An attempt that failed (the store unreachable) is no
// attempt: the term runs out at Until.
func (t Term) After(sent time.Time, d Decision, written bool, timing Timing) Term {
	if written && d.Action != Wait {
		return Term{Token: d.Token, Until: sent.Add(timing.TTL)}
	}
	return Term{}
}

// Member is a replica's row as stored: its times in the database's
// clock (milliseconds). Nonce is its process's (Self).
type Member struct {
	ID        string
	Nonce     string
	Address   string
	Version   string
	Started   int64
	Heartbeat int64
	Expires   int64
}

// Live reports whether m is alive at the database's time dbNow: it
// renewed its row within its TTL.
func (m Member) Live(dbNow int64) bool { return dbNow < m.Expires }

// OthersLive is how many replicas other than me are alive at dbNow.
func OthersLive(me string, members []Member, dbNow int64) int {
	n := 0
	for _, m := range members {
		if m.ID != me && m.Live(dbNow) {
			n++
		}
	}
	return n
}

// SameID is the live row, if any, of another process that runs with
// me's ID (another nonce) at dbNow: two podhubs given one replica ID.
func SameID(me Self, members []Member, dbNow int64) *Member {
	for _, m := range members {
		if m.ID == me.ID && m.Nonce != me.Nonce && m.Live(dbNow) {
			return &m
		}
	}
	return nil
}

// Silent reports whether m, a row of another process with one's ID, has
// not heartbeated for after at the database's time dbNow: a live
// process heartbeats at every round (a renewal period while it leads, a
// poll while it does not), so one silent for longer than its period and
// the margin is taken for dead (killed and restarted at once, say) and
// its row is replaced. Safety does not rest on this: a process wrongly
// taken for dead holds no lease the newcomer's nonce passes for, and
// its own heartbeats then fail.
func Silent(m Member, dbNow int64, after time.Duration) bool {
	return !m.Live(dbNow) || dbNow-m.Heartbeat >= after.Milliseconds()
}

// FenceHolds reports whether a write carrying token may land, given the
// lease as the write's own transaction reads it: the same holder process
// (ID and nonce) and token, so no other replica has led since (the
// store's Fence is this test in SQL).
func FenceHolds(me Self, token int64, l *Lease) bool {
	return l != nil && l.heldBy(me) && l.Token == token && token != 0
}

// MaxIDLength bounds a replica's ID (a DNS label's length).
const MaxIDLength = 63

// CheckID says what is wrong with a replica ID, if anything: 1 to 63
// lowercase letters, digits, '-' and '.', starting and ending with a
// letter or digit (a host name's characters, shown in columns and logs).
func CheckID(id string) error {
	if id == "" || len(id) > MaxIDLength {
		return fmt.Errorf("replica ID %q: want 1 to %d characters", id, MaxIDLength)
	}
	for i, c := range []byte(id) {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' && c != '.' || i == 0 || i == len(id)-1) {
			return fmt.Errorf("replica ID %q: want lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", id)
		}
	}
	return nil
}
