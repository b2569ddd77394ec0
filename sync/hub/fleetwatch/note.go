package fleetwatch

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Note is a change as one replica tells the others (PostgreSQL's
// NOTIFY, see fleetdb): a device ("" for the fleet), what of it changed,
// and, for a heartbeat or a presence, when the device was heard from
// (the silence watch's clock; zero otherwise).
type Note struct {
	Device string
	What   What
	Heard  time.Time
}

// Notes coalesces notes, one per device: what changed is joined, the
// newest heard time kept.
type Notes map[string]Note

// Add joins n to what is there of its device.
func (ns Notes) Add(n Note) {
	cur := ns[n.Device]
	cur.Device = n.Device
	cur.What |= n.What
	if n.Heard.After(cur.Heard) {
		cur.Heard = n.Heard
	}
	ns[n.Device] = cur
}

// Wire format of a notification's payload, text so that psql shows it:
//
//	pw1 INSTANCE ENTRY…
//
// INSTANCE is the sending replica's instance ID (hex), so a replica
// skips its own; each ENTRY is WHAT:DEVICE or WHAT:DEVICE@MS, WHAT the
// change's bits in hex, DEVICE the device ID (empty for the fleet; a
// device ID holds no ':', '@' or space) and MS the Unix milliseconds it
// was heard from.
const (
	wireVersion = "pw1"
	// MaxPayload bounds a payload: PostgreSQL refuses one of 8000 bytes
	// or more.
	MaxPayload = 7900
	// MaxPayloads bounds the notifications one Encode makes: more notes
	// than fit become one Everything change (coalesced: the readers
	// re-read all, cheaper than a flood), with their signals.
	MaxPayloads = 8
	// maxInstance bounds an instance ID.
	maxInstance = 32
	// maxDevice is a device ID's longest (protocol.ValidDeviceID).
	maxDevice = 63
)

// Encode is the payloads that tell notes, from the replica instance:
// sorted by device, packed into payloads of at most MaxPayload bytes,
// at most MaxPayloads of them (else one Everything change).
func Encode(instance string, notes Notes) []string {
	if len(notes) == 0 {
		return nil
	}
	devices := make([]string, 0, len(notes))
	for d := range notes {
		devices = append(devices, d)
	}
	sort.Strings(devices)
	head := wireVersion + " " + instance
	var out []string
	var b strings.Builder
	for _, d := range devices {
		n := notes[d]
		if n.What&all == 0 {
			continue
		}
		entry := strconv.FormatUint(uint64(n.What&all), 16) + ":" + d
		if !n.Heard.IsZero() && n.Heard.UnixMilli() > 0 {
			entry += "@" + strconv.FormatInt(n.Heard.UnixMilli(), 10)
		}
		if b.Len() > 0 && b.Len()+1+len(entry) > MaxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(head)
		}
		b.WriteString(" ")
		b.WriteString(entry)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	if len(out) > MaxPayloads {
		// The signals are kept: a resync of the readers runs no pass.
		var signalled What
		for _, n := range notes {
			signalled |= n.What & signals
		}
		return []string{head + " " + strconv.FormatUint(uint64(Everything|signalled), 16) + ":"}
	}
	return out
}

// Decode reads a payload Encode made (or anyone able to NOTIFY on the
// store's channel: it is checked, and refused with the part that is
// wrong).
func Decode(payload string) (instance string, notes []Note, err error) {
	if len(payload) > MaxPayload {
		return "", nil, fmt.Errorf("change notification: %d bytes, more than %d", len(payload), MaxPayload)
	}
	fields := strings.Split(payload, " ")
	if len(fields) < 3 || fields[0] != wireVersion {
		return "", nil, errors.New("change notification: not \"" + wireVersion + " INSTANCE ENTRY…\"")
	}
	instance = fields[1]
	if len(instance) == 0 || len(instance) > maxInstance || strings.Trim(instance, "0123456789abcdef") != "" {
		return "", nil, fmt.Errorf("change notification: instance %q: want 1 to %d lower-case hex digits", instance, maxInstance)
	}
	for i, e := range fields[2:] {
		n, err := decodeEntry(e)
		if err != nil {
			return "", nil, fmt.Errorf("change notification: entry %d %q: %w", i+1, e, err)
		}
		notes = append(notes, n)
	}
	return instance, notes, nil
}

// decodeEntry reads WHAT:DEVICE[@MS].
func decodeEntry(e string) (Note, error) {
	what, rest, ok := strings.Cut(e, ":")
	if !ok {
		return Note{}, errors.New("no ':' after what changed")
	}
	bits, err := strconv.ParseUint(what, 16, 8)
	if err != nil || bits == 0 || What(bits)&^all != 0 {
		return Note{}, fmt.Errorf("what changed %q: want hex bits of %x", what, uint8(all))
	}
	device, ms, heard := strings.Cut(rest, "@")
	if len(device) > maxDevice || strings.Trim(device, "abcdefghijklmnopqrstuvwxyz0123456789-._") != "" {
		return Note{}, fmt.Errorf("device %q: want up to %d lower-case letters, digits, '-', '.' or '_'", device, maxDevice)
	}
	n := Note{Device: device, What: What(bits)}
	if heard {
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || v <= 0 || len(ms) > 15 {
			return Note{}, fmt.Errorf("heard at %q: want positive Unix milliseconds", ms)
		}
		n.Heard = time.UnixMilli(v)
	}
	return n, nil
}

// Receive hands notes heard from another replica to this one's
// subscribers (and a heard time to the silence watch), and their
// signals to OnSignal's function, telling no other replica. A heard
// time is the sender's clock: one past this replica's now is taken as
// now, since the silence watch's deadlines only grow and a far-future
// time would hide the device's silence for as long.
func (f *Feed) Receive(notes []Note) {
	f.mu.Lock()
	fn := f.onSignal
	f.mu.Unlock()
	for _, n := range notes {
		if !n.Heard.IsZero() {
			if now := f.clock(); n.Heard.After(now) {
				n.Heard = now
			}
			f.Heard(n.Device, n.Heard)
		}
		f.Deliver(n.Device, n.What)
		if sig := n.What & signals; sig != 0 && fn != nil {
			fn(n.Device, sig)
		}
	}
}
