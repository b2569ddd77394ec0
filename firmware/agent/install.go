package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvisor/podvisor/sync/protocol"
)

// spaceMargin is kept free besides what an install writes.
const spaceMargin = 1 << 20

// install downloads, verifies and stages an agent release in a new slot,
// writes the handoff and switches to it. A failure before the switch
// leaves the current version as it was.
func (u *Updater) install(ctx context.Context, o *protocol.Order, r *protocol.Release, st *protocol.UpdateState) error {
	arts := r.For(u.o.Arch)
	var podvisor protocol.Artifact
	for _, a := range arts {
		if a.Name == Binary {
			podvisor = a
		}
	}
	name := SlotName(r.Version, podvisor.SHA256)
	if !validSlotName(name) {
		return fmt.Errorf("release version %q makes no slot name", r.Version)
	}
	if cur, _ := u.layout.Linked(linkCurrent); cur != nil && cur.Name == name {
		return fmt.Errorf("slot %s is current already, in state %s", name, cur.Record.State)
	}
	// Files the current slot has already (same SHA-256) are copied from
	// it, not downloaded.
	cur, _ := u.layout.Linked(linkCurrent)
	var fetch []protocol.Artifact
	local := map[string]string{}
	for _, a := range arts {
		if cur != nil {
			if f, ok := cur.Record.file(a.Name); ok && f.SHA256 == a.SHA256 && f.Size == a.Size {
				local[a.Name] = filepath.Join(cur.Dir, a.Name)
				continue
			}
		}
		fetch = append(fetch, a)
	}
	if err := os.MkdirAll(u.layout.slots(), 0o700); err != nil {
		return err
	}
	u.layout.Collect(o.ID, name) // leftovers of a crash and of older orders
	if u.staged(name, o.ID, arts) {
		return u.switchTo(ctx, name) // staged before a crash: verified again, not fetched again
	}
	var extra int64
	for _, a := range arts {
		extra += a.Size // every file is written once more into the slot, unless renamed
	}
	wires, err := u.fetch(ctx, o.ID, fetch, &extra, st)
	if err != nil {
		return err
	}
	crashPoint("verified")

	st.Phase, st.Percent = protocol.UpdateInstalling, 0
	u.report(*st)
	tmp := u.layout.slotDir(name + ".tmp")
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return diskFull(err, u.layout.Dir)
	}
	rec := Record{Version: r.Version, Order: o.ID, State: StateTrial, TriesLeft: Tries}
	for i, a := range fetch {
		if err := u.place(wires[i], filepath.Join(tmp, a.Name), a); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	for n, src := range local {
		a, _ := artifactNamed(arts, n)
		in, err := os.Open(src)
		if err == nil {
			err = writeVerified(filepath.Join(tmp, n), in, n, a.Size, a.SHA256)
			in.Close()
		}
		if err != nil {
			os.RemoveAll(tmp)
			return diskFull(fmt.Errorf("copying %s from the current slot: %w", n, err), u.layout.Dir)
		}
	}
	for _, a := range arts {
		rec.Files = append(rec.Files, File{Name: a.Name, Size: a.Size, SHA256: a.SHA256})
	}
	if err := writeRecord(tmp, rec); err != nil {
		os.RemoveAll(tmp)
		return diskFull(err, u.layout.Dir)
	}
	final := u.layout.slotDir(name)
	os.RemoveAll(final) // a slot of this name that is not current: a failed one, tried again
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := syncDir(u.layout.slots()); err != nil {
		return err
	}
	os.RemoveAll(filepath.Join(u.layout.downloads(), fmt.Sprint(o.ID)))
	crashPoint("staged")
	return u.switchTo(ctx, name)
}

// staged reports whether slot name holds order's files, complete and
// verified.
func (u *Updater) staged(name string, order int64, arts []protocol.Artifact) bool {
	s, err := u.layout.open(name)
	if err != nil || s.Record.Order != order || s.Record.State != StateTrial || len(s.Record.Files) != len(arts) {
		return false
	}
	for _, a := range arts {
		if sum, err := fileSHA256(filepath.Join(s.Dir, a.Name)); err != nil || sum != a.SHA256 {
			return false
		}
	}
	return true
}

// switchTo writes the handoff and makes slot name current, unless the
// order was superseded first.
func (u *Updater) switchTo(ctx context.Context, name string) error {
	u.mu.Lock()
	if ctx.Err() != nil {
		u.mu.Unlock()
		u.layout.Remove(name)
		return errSuperseded
	}
	u.switched = true // from here on the order is carried through
	u.mu.Unlock()
	if err := u.writeHandoff(); err != nil {
		u.layout.Remove(name)
		return diskFull(fmt.Errorf("writing the handoff: %w", err), u.layout.Dir)
	}
	if err := u.layout.Switch(name); err != nil {
		return err
	}
	crashPoint("switched")
	return nil
}

func artifactNamed(arts []protocol.Artifact, name string) (protocol.Artifact, bool) {
	for _, a := range arts {
		if a.Name == name {
			return a, true
		}
	}
	return protocol.Artifact{}, false
}

// fetch downloads artifacts into download/<order>/<transfer sha>.part,
// checks the free space first (the transfer left plus extra bytes), and
// verifies each one's transfer size and SHA-256, reporting Downloading,
// then Verifying. It returns the verified files, in order.
func (u *Updater) fetch(ctx context.Context, order int64, arts []protocol.Artifact, extra *int64, st *protocol.UpdateState) ([]string, error) {
	dir := filepath.Join(u.layout.downloads(), fmt.Sprint(order))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, diskFull(err, u.layout.Dir)
	}
	var total, have, need int64
	parts := make([]string, len(arts))
	for i, a := range arts {
		sha, size := a.Transfer()
		parts[i] = filepath.Join(dir, sha+".part")
		total += size
		if fi, err := os.Stat(parts[i]); err == nil && fi.Size() <= size {
			have += fi.Size()
		}
		if a.Encoding != "" {
			need += a.Size // decoded beside the download
		}
	}
	need += total - have + spaceMargin
	if extra != nil {
		need += *extra
		for _, a := range arts {
			if a.Encoding == "" {
				need -= a.Size // renamed into the slot, not copied
			}
		}
	}
	if free, err := freeBytes(dir); err == nil && free < need {
		return nil, fmt.Errorf("disk full in %s: the update needs %d bytes, %d are free", u.layout.Dir, need, free)
	}
	if len(arts) > 0 && u.o.Transport == nil {
		return nil, errors.New("no hub connection to download the release from")
	}
	st.Phase, st.Percent = protocol.UpdateDownloading, 0
	u.report(*st)
	var before int64
	for i, a := range arts {
		base := before
		err := u.o.Transport.Download(ctx, order, a, parts[i], func(done int64) {
			if p := percent(base+done, total); p != st.Percent {
				st.Percent = p
				u.report(*st)
			}
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("downloading %s: %w", a.Name, errSuperseded)
			}
			os.Remove(parts[i])
			return nil, diskFull(fmt.Errorf("downloading %s: %w", a.Name, err), u.layout.Dir)
		}
		_, size := a.Transfer()
		before += size
	}
	st.Phase, st.Percent = protocol.UpdateVerifying, 0
	u.report(*st)
	for i, a := range arts {
		if err := checkWire(parts[i], a); err != nil {
			os.Remove(parts[i])
			return nil, err
		}
	}
	return parts, nil
}

func percent(done, total int64) int {
	if total <= 0 || done >= total {
		return 100
	}
	return int(done * 100 / total)
}

// place puts an artifact's installed bytes at dest from its verified wire
// file: decoded and checked, or renamed when it travelled as is.
func (u *Updater) place(wire, dest string, a protocol.Artifact) error {
	if a.Encoding == "" {
		if err := os.Chmod(wire, 0o755); err != nil {
			return err
		}
		if err := os.Rename(wire, dest); err != nil {
			return err
		}
		f, err := os.Open(dest) // the transport wrote it; make it durable
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	}
	return diskFull(decodeTo(wire, dest, a), u.layout.Dir)
}
