package replica

import (
	"hash/fnv"
	"math/bits"
	"slices"
	"time"
)

// Device ownership: the fleet's devices are cut into Buckets buckets by
// Bucket, and each bucket is handled by one replica at a time, its
// holder in the device_owners table. Ownership rides on the holder's
// membership row (the replicas table, renewed at every elector round):
// a bucket whose holder's row expired (past the margin, on the
// database's clock) or belongs to another process is free, and the
// live replicas share the buckets evenly (Rebalance). A replica counts
// its ownership valid on its own clock until its membership term ends
// (the send time of its last heartbeat plus the TTL), as Term does for
// the leader: it stops handling its devices no later than the database
// deems its row expired, and a taker waits a further margin.

// Buckets is how many ownership buckets the fleet's devices fall in.
const Buckets = 1024

// Bucket is device's ownership bucket: FNV-1a (32 bits) of its ID,
// modulo Buckets. The one function every replica uses.
func Bucket(device string) int {
	h := fnv.New32a()
	h.Write([]byte(device))
	return int(h.Sum32() % Buckets)
}

// Owner is a device_owners row: the bucket's holder process (ID and
// nonce, Self) since Since (the database's clock, milliseconds).
type Owner struct {
	Bucket int
	Holder string
	Nonce  string
	Since  int64
}

// heldBy reports whether the row names process me.
func (o Owner) heldBy(me Self) bool { return o.Holder == me.ID && o.Nonce == me.Nonce }

// Free reports whether bucket row o (nil: no row) may be taken at the
// database's time dbNow: unowned, or its holder's membership row is
// gone, belongs to another process of the holder's ID (the holder died
// and was replaced), or expired more than the margin ago.
func Free(o *Owner, members []Member, dbNow int64, t Timing) bool {
	if o == nil || o.Holder == "" {
		return true
	}
	for _, m := range members {
		if m.ID == o.Holder {
			return m.Nonce != o.Nonce || dbNow > m.Expires+t.Margin.Milliseconds()
		}
	}
	return true
}

// Target is each live replica's share of the buckets: ceil(Buckets /
// live) (all of them for one).
func Target(live int) int {
	if live < 1 {
		live = 1
	}
	return (Buckets + live - 1) / live
}

// Rebalance is what replica process me does with the buckets in its
// round, from the members' and the owners' rows read at the database's
// time dbNow: the buckets to release (its extras above its share, the
// highest first) and those to take (free ones up to its share, the
// lowest first). A replica whose own row is not live takes and releases
// nothing (its ownership runs out with its term). Releases and takes
// are written guarded (Store.ReleaseBuckets, Store.TakeBuckets): a take
// lands only if the row is still as read and still free.
func Rebalance(me Self, members []Member, owners []Owner, dbNow int64, t Timing) (take, release []int) {
	live, meLive := 0, false
	for _, m := range members {
		if m.Live(dbNow) {
			live++
			if m.ID == me.ID && m.Nonce == me.Nonce {
				meLive = true
			}
		}
	}
	if !meLive {
		return nil, nil
	}
	target := Target(live)
	rows := make([]*Owner, Buckets)
	var mine []int
	for i := range owners {
		o := &owners[i]
		if o.Bucket < 0 || o.Bucket >= Buckets {
			continue
		}
		rows[o.Bucket] = o
		if o.heldBy(me) {
			mine = append(mine, o.Bucket)
		}
	}
	slices.Sort(mine)
	if len(mine) > target {
		release = slices.Clone(mine[target:])
		slices.Reverse(release)
		return nil, release
	}
	for b := 0; b < Buckets && len(mine)+len(take) < target; b++ {
		if o := rows[b]; o != nil && o.heldBy(me) {
			continue
		}
		if Free(rows[b], members, dbNow, t) {
			take = append(take, b)
		}
	}
	return take, nil
}

// Ownership is a replica's view of the buckets it handles, on its own
// clock: valid until Until (the send time of the heartbeat that last
// renewed its membership, plus the TTL). Immutable once made.
type Ownership struct {
	bits  [Buckets / 64]uint64
	Until time.Time
}

// Has reports whether bucket b is held, whatever the validity.
func (o *Ownership) Has(b int) bool {
	return o != nil && b >= 0 && b < Buckets && o.bits[b/64]&(1<<(b%64)) != 0
}

// Owns reports whether device's bucket is held and the ownership valid
// at now.
func (o *Ownership) Owns(device string, now time.Time) bool {
	return o != nil && now.Before(o.Until) && o.Has(Bucket(device))
}

// Count is how many buckets are held.
func (o *Ownership) Count() int {
	if o == nil {
		return 0
	}
	n := 0
	for _, w := range o.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// With is o with buckets set (add) or cleared, valid until until.
func (o *Ownership) With(buckets []int, add bool, until time.Time) *Ownership {
	n := &Ownership{Until: until}
	if o != nil {
		n.bits = o.bits
	}
	for _, b := range buckets {
		if b < 0 || b >= Buckets {
			continue
		}
		if add {
			n.bits[b/64] |= 1 << (b % 64)
		} else {
			n.bits[b/64] &^= 1 << (b % 64)
		}
	}
	return n
}

// Held is the buckets held, in order.
func (o *Ownership) Held() []int {
	if o == nil {
		return nil
	}
	var out []int
	for b := range Buckets {
		if o.Has(b) {
			out = append(out, b)
		}
	}
	return out
}

// AllBuckets is every bucket: a lone replica's share.
func AllBuckets() []int {
	out := make([]int, Buckets)
	for i := range out {
		out[i] = i
	}
	return out
}
