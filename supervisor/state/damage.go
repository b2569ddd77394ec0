package state

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sqldb"
)

// CheckTimeout bounds the integrity check at startup: the database holds a
// few pods, so a check that runs longer means a sick disk, not a big file.
var CheckTimeout = 10 * time.Second

// KeepDamaged is how many damaged databases are kept for inspection.
const KeepDamaged = 3

// Damage says why a state database could not be used and where it went.
type Damage struct {
	Path    string // the database that was damaged
	MovedTo string // where it was moved ("" when only its WAL remained)
	Reason  string
}

func (d *Damage) Error() string {
	if d.MovedTo == "" {
		return fmt.Sprintf("state database %s is damaged: %s", d.Path, d.Reason)
	}
	return fmt.Sprintf("state database %s is damaged (%s); moved to %s", d.Path, d.Reason, d.MovedTo)
}

// OpenOrReplace opens the database like Open, but a database that is
// damaged (unreadable header, failed integrity check, failed migration or
// unreadable records, an empty file, a WAL left without its database) is
// moved aside with an error-level log line and replaced by an empty one.
// The daemon then rebuilds its pods from the runtime: the instance locks,
// not this file, say what runs (DESIGN.md §3). Damaged reports what
// happened.
func OpenOrReplace(path string, log *slog.Logger) (*Store, error) {
	reason := strayFiles(path)
	if reason == "" {
		existed := nonEmpty(path) || nonEmpty(path+"-wal")
		s, err := Open(path)
		if err == nil {
			if err = s.verify(); err == nil {
				if err = s.checkIdentity(path, existed); err == nil {
					return s, nil
				}
			}
			s.Close()
		}
		if errors.Is(err, sqldb.ErrNewerSchema) {
			return nil, err
		}
		reason = err.Error()
	}
	damage, mvErr := moveAside(path, reason, time.Now())
	if mvErr != nil {
		return nil, fmt.Errorf("state database %s is damaged (%s) and cannot be moved aside: %w", path, reason, mvErr)
	}
	log.Error("STATE DATABASE DAMAGED: moved aside, starting with an empty one; running pods are adopted from their instance directories",
		"path", damage.Path, "movedTo", damage.MovedTo, "reason", damage.Reason)
	s, err := Open(path)
	if err == nil {
		err = s.checkIdentity(path, false)
	}
	if err != nil {
		return nil, err
	}
	s.damage = damage
	return s, nil
}

// Damaged reports the damaged database OpenOrReplace moved aside, or nil.
func (s *Store) Damaged() *Damage { return s.damage }

// Empty reports whether the database held no supervisor tables when it
// was opened: a new device, or a database deleted, emptied or replaced.
func (s *Store) Empty() bool { return s.empty }

func nonEmpty(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Size() > 0
}

// strayFiles finds damage SQLite would not report: a zero-length database
// with no WAL to fill it (truncated: SQLite takes it for a new database),
// or a WAL without its database (SQLite would replay it into a new one).
func strayFiles(path string) string {
	wal, walErr := os.Stat(path + "-wal")
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && walErr == nil:
		return "the database file is missing but its WAL remains"
	case err == nil && st.Size() == 0 && (walErr != nil || wal.Size() == 0):
		return "the file is empty (truncated)"
	}
	return ""
}

// verify runs SQLite's quick_check, bounded in time, and reads every
// record: a database that cannot be read whole is not trusted. A check
// that runs out of time is not damage: the reads still check the records.
func (s *Store) verify() error {
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	if err := s.quickCheck(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	if _, err := s.Instances(); err != nil {
		return fmt.Errorf("reading pod records: %w", err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM container_instances`).Scan(&n); err != nil {
		return fmt.Errorf("reading container history: %w", err)
	}
	return nil
}

func (s *Store) quickCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return fmt.Errorf("quick_check: %w", err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("quick_check: %w", err)
		}
		if line != "ok" && len(problems) < 3 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("quick_check: %w", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("quick_check: %s", strings.Join(problems, "; "))
	}
	return nil
}

// moveAside renames the database and its WAL and shared-memory files to
// path.corrupt-TIMESTAMP[-wal|-shm], keeping the newest KeepDamaged.
func moveAside(path, reason string, now time.Time) (*Damage, error) {
	d := &Damage{Path: path, Reason: reason}
	stamp := now.UTC().Format("20060102T150405.000Z")
	base := path + ".corrupt-" + stamp
	for _, suffix := range []string{"", "-wal", "-shm"} {
		err := os.Rename(path+suffix, base+suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if suffix == "" {
			d.MovedTo = base
		}
	}
	if d.MovedTo == "" {
		d.MovedTo = base + "-wal"
	}
	pruneDamaged(path)
	return d, nil
}

// pruneDamaged removes all but the newest KeepDamaged moved-aside
// databases (with their WAL and shm files).
func pruneDamaged(path string) {
	files, _ := filepath.Glob(path + ".corrupt-*")
	stamps := map[string]bool{}
	for _, f := range files {
		stamp := strings.TrimPrefix(f, path+".corrupt-")
		stamp = strings.TrimSuffix(strings.TrimSuffix(stamp, "-wal"), "-shm")
		stamps[stamp] = true
	}
	sorted := make([]string, 0, len(stamps))
	for s := range stamps {
		sorted = append(sorted, s)
	}
	sort.Strings(sorted) // timestamps sort by time
	for len(sorted) > KeepDamaged {
		base := path + ".corrupt-" + sorted[0]
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(base + suffix)
		}
		sorted = sorted[1:]
	}
}

// checkIdentity ties the database to the file beside it, path.id: SQLite
// replays any WAL it finds next to a database, and a WAL from another
// database (a restored backup, a copied data dir) yields a healthy-looking
// database with someone else's pods. The identity is a random
// application_id, kept in the database header and in path.id. existed:
// the files held something before this open, so a database without
// tables is not a new one.
func (s *Store) checkIdentity(path string, existed bool) error {
	var id int32
	if err := s.db.QueryRow(`PRAGMA application_id`).Scan(&id); err != nil {
		return fmt.Errorf("reading the database identity: %w", err)
	}
	idPath := path + ".id"
	data, err := os.ReadFile(idPath)
	switch {
	case err == nil && (!s.empty || existed):
		// An identity of 0 beside path.id: the header is not ours either.
		want, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 32)
		if perr == nil && int32(want) != id {
			return fmt.Errorf("the database (or its WAL) belongs to another database: identity %d, want %d from %s", id, want, idPath)
		}
		if perr == nil {
			return nil
		}
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("reading %s: %w", idPath, err)
	}
	if id == 0 || s.empty && !existed { // new, or written by a podvisor without identities
		for id = 0; id == 0; {
			var b [4]byte
			rand.Read(b[:])
			id = int32(binary.BigEndian.Uint32(b[:]) >> 1)
		}
		if _, err := s.db.Exec(fmt.Sprintf(`PRAGMA application_id = %d`, id)); err != nil {
			return fmt.Errorf("recording the database identity: %w", err)
		}
	}
	tmp := idPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(int(id))+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, idPath)
}
