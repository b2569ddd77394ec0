package failover

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver: the test reads the fleet store directly

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

// fleetStore reads the replicas' PostgreSQL store directly: what every
// replica stored, without going through any one of them.
type fleetStore struct{ db *sql.DB }

func openStore(t *testing.T, url string) *fleetStore {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return &fleetStore{db: db}
}

// ticks is the sensor pod's newest tick each device's mirror holds.
func (s *fleetStore) ticks() (map[string]int64, error) {
	rows, err := s.db.Query(`SELECT device, pod FROM mirrors WHERE key = $1`, sensorKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var device string
		var b []byte
		if err := rows.Scan(&device, &b); err != nil {
			return nil, err
		}
		var p v1.Pod
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("%s's mirror of %s: %w", device, sensorKey, err)
		}
		n, err := strconv.ParseInt(p.Annotations[tickAnnotation], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s's mirror of %s: annotation %s: %w", device, sensorKey, tickAnnotation, err)
		}
		out[device] = n
	}
	return out, rows.Err()
}

// duplicateEvents are the events stored more than once: rows sharing a
// device and sequence number, or a device, pod and event.
func (s *fleetStore) duplicateEvents() ([]string, error) {
	var dups []string
	for _, q := range []string{
		`SELECT device || ' seq ' || seq, count(*) FROM events GROUP BY device, seq HAVING count(*) > 1`,
		`SELECT device || ' ' || key || ' ' || convert_from(event, 'UTF8'), count(*) FROM events GROUP BY device, key, event HAVING count(*) > 1`,
	} {
		rows, err := s.db.Query(q)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var what string
			var n int
			if err := rows.Scan(&what, &n); err != nil {
				rows.Close()
				return nil, err
			}
			dups = append(dups, fmt.Sprintf("%s (%d rows)", what, n))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// tickEvents are the messages of each device's stored Tick events.
func (s *fleetStore) tickEvents() (map[string][]string, error) {
	rows, err := s.db.Query(`SELECT device, event FROM events WHERE key = $1 ORDER BY device, seq`, sensorKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var device string
		var b []byte
		if err := rows.Scan(&device, &b); err != nil {
			return nil, err
		}
		var ev protocol.Event
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("%s's event: %w", device, err)
		}
		if ev.Reason == "Tick" {
			out[device] = append(out[device], ev.Message)
		}
	}
	return out, rows.Err()
}

// generations are each device's desired generation, and the generation
// its newest ack stored says it observed.
func (s *fleetStore) generations() (desired, observed map[string]int64, err error) {
	desired, observed = map[string]int64{}, map[string]int64{}
	for q, into := range map[string]map[string]int64{
		`SELECT device, generation FROM desired`: desired,
		`SELECT device, observed FROM acks`:      observed,
	} {
		rows, err := s.db.Query(q)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var device string
			var g int64
			if err := rows.Scan(&device, &g); err != nil {
				rows.Close()
				return nil, nil, err
			}
			into[device] = g
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return desired, observed, nil
}

// holder is the replica holding bucket ("-" for none), or the error.
func (s *fleetStore) holder(bucket int) string {
	var h string
	err := s.db.QueryRow(`SELECT holder FROM device_owners WHERE bucket = $1`, bucket).Scan(&h)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "-"
	case err != nil:
		return err.Error()
	}
	return h
}

// device is what the store holds of a device's presence: online, when
// it was last heard from (the replica's clock) and its status cursor.
func (s *fleetStore) device(id string) string {
	var online, seen int64
	err := s.db.QueryRow(`SELECT online, last_seen FROM devices WHERE id = $1`, id).Scan(&online, &seen)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("online %d, last seen %s", online, time.UnixMilli(seen).Format(time.StampMilli))
}
