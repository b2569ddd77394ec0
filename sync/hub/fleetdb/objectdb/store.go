// Package objectdb owns the fleet database's table of the ConfigMaps and
// Secrets applied at the hub (config_objects): it checks an apply against
// what is stored as the API server does, gives each object its uid,
// resourceVersion and creationTimestamp, seals every Secret at rest
// (AES-256-GCM under a key kept outside the database, keys.go), and tells
// who asked (OnChange) what changed.
//
// For the distribution of objects to devices: Get (an objects.Getter),
// List and Entries read objects by namespace and name, a Secret's data
// opened; OnChange says which objects an apply or a delete changed.
package objectdb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sqldb"
)

// Bounds on what the hub keeps, so an apply cannot grow the database
// without bound (each object is at most 1 MiB of values).
const (
	MaxObjects = 10000
	MaxBytes   = 256 << 20
)

// Store is the ConfigMaps and Secrets, on the fleet's database.
type Store struct {
	db   *sqldb.DB
	keys atomic.Pointer[Keyring]

	mu       sync.Mutex
	watchers []func([]objects.Ref)
}

// New is the objects' table in the fleet database db (fleetdb opens and
// migrates it: Fleet.SQL). Secrets need a key: SetKeys.
func New(db *sqldb.DB) *Store { return &Store{db: db} }

// SetKeys gives the store the keys that seal and open Secrets.
func (s *Store) SetKeys(k *Keyring) { s.keys.Store(k) }

// OnChange registers fn, called after every committed apply or delete
// with the objects it changed (created, updated or deleted; an object
// applied again unchanged keeps its resourceVersion and is not named).
// fn runs on the writer's goroutine and must not block: it wakes its
// own loop, as the API wakes the scheduler (Scheduler.Reschedule).
func (s *Store) OnChange(fn func(refs []objects.Ref)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers = append(s.watchers, fn)
}

func (s *Store) changed(refs []objects.Ref) {
	if len(refs) == 0 {
		return
	}
	s.mu.Lock()
	ws := slices.Clone(s.watchers)
	s.mu.Unlock()
	for _, fn := range ws {
		fn(refs)
	}
}

// Entry is what a list shows of an object and a device's index names,
// read without opening a Secret.
type Entry struct {
	objects.Ref
	UID             string        `json:"uid"`
	ResourceVersion string        `json:"resourceVersion"`
	Immutable       bool          `json:"immutable,omitempty"`
	Type            v1.SecretType `json:"type,omitempty"`
	// Keys is the number of keys (a ConfigMap's data and binaryData).
	Keys    int       `json:"keys"`
	Created time.Time `json:"created"`
}

// Entries are the objects of a kind in namespace ("": every namespace),
// by namespace and name, without their data.
func (s *Store) Entries(kind objects.Kind, namespace string) ([]Entry, error) {
	rows, err := s.db.Query(`SELECT namespace, name, uid, version, immutable, type, keys, created FROM config_objects
		WHERE kind = ? AND (? = '' OR namespace = ?) ORDER BY namespace, name`, kind, namespace, namespace)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e := Entry{Ref: objects.Ref{Kind: kind}}
		var version, created int64
		if err := rows.Scan(&e.Namespace, &e.Name, &e.UID, &version, &e.Immutable, &e.Type, &e.Keys, &created); err != nil {
			return nil, err
		}
		e.ResourceVersion, e.Created = strconv.FormatInt(version, 10), time.UnixMilli(created).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// Get is one object with its data, a Secret's opened; a missing one is
// an *objects.NotFoundError. The store is an objects.Getter.
func (s *Store) Get(ref objects.Ref) (*objects.Object, error) {
	switch ref.Kind {
	case objects.ConfigMap:
		cm, err := s.ConfigMap(ref.Namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return objects.FromConfigMap(cm), nil
	case objects.Secret:
		sec, err := s.Secret(ref.Namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return objects.FromSecret(sec), nil
	}
	return nil, fmt.Errorf("%s: not a kind the hub stores", ref)
}

// List is every object of a kind in namespace ("": every namespace) with
// its data, a Secret's opened, by namespace and name.
func (s *Store) List(kind objects.Kind, namespace string) ([]*objects.Object, error) {
	var out []*objects.Object
	err := s.each(kind, namespace, func(raw []byte) error {
		var o *objects.Object
		switch kind {
		case objects.ConfigMap:
			cm := &v1.ConfigMap{}
			if err := json.Unmarshal(raw, cm); err != nil {
				return err
			}
			o = objects.FromConfigMap(cm)
		case objects.Secret:
			sec := &v1.Secret{}
			if err := json.Unmarshal(raw, sec); err != nil {
				return err
			}
			o = objects.FromSecret(sec)
		}
		out = append(out, o)
		return nil
	})
	return out, err
}

// ConfigMaps are the ConfigMaps of namespace ("": every namespace).
func (s *Store) ConfigMaps(namespace string) ([]*v1.ConfigMap, error) {
	var out []*v1.ConfigMap
	err := s.each(objects.ConfigMap, namespace, func(raw []byte) error {
		cm := &v1.ConfigMap{}
		out = append(out, cm)
		return json.Unmarshal(raw, cm)
	})
	return out, err
}

// Secrets are the Secrets of namespace ("": every namespace), opened:
// their data must not leave the hub but sealed for a device.
func (s *Store) Secrets(namespace string) ([]*v1.Secret, error) {
	var out []*v1.Secret
	err := s.each(objects.Secret, namespace, func(raw []byte) error {
		sec := &v1.Secret{}
		out = append(out, sec)
		return json.Unmarshal(raw, sec)
	})
	return out, err
}

// ConfigMap is one ConfigMap as stored.
func (s *Store) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	cm := &v1.ConfigMap{}
	return cm, s.one(s.db, objects.Ref{Kind: objects.ConfigMap, Namespace: namespace, Name: name}, cm)
}

// Secret is one Secret as stored, its data opened.
func (s *Store) Secret(namespace, name string) (*v1.Secret, error) {
	sec := &v1.Secret{}
	return sec, s.one(s.db, objects.Ref{Kind: objects.Secret, Namespace: namespace, Name: name}, sec)
}

// queryer is the database or a transaction.
type queryer interface {
	QueryRow(string, ...any) *sql.Row
	Query(string, ...any) (*sql.Rows, error)
	Exec(string, ...any) (sql.Result, error)
}

// one reads an object into v; *objects.NotFoundError if there is none.
func (s *Store) one(q queryer, ref objects.Ref, v any) error {
	var uid, keyID string
	var raw []byte
	err := q.QueryRow(`SELECT uid, key_id, object FROM config_objects WHERE kind = ? AND namespace = ? AND name = ?`,
		ref.Kind, ref.Namespace, ref.Name).Scan(&uid, &keyID, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return &objects.NotFoundError{Ref: ref}
	}
	if err != nil {
		return err
	}
	if raw, err = s.plain(ref, uid, keyID, raw); err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// each calls fn with the JSON of every object of kind in namespace (""
// every one), opened, in order of namespace and name.
func (s *Store) each(kind objects.Kind, namespace string, fn func(raw []byte) error) error {
	rows, err := s.db.Query(`SELECT namespace, name, uid, key_id, object FROM config_objects
		WHERE kind = ? AND (? = '' OR namespace = ?) ORDER BY namespace, name`, kind, namespace, namespace)
	if err != nil {
		return err
	}
	type row struct {
		ref        objects.Ref
		uid, keyID string
		raw        []byte
	}
	var all []row
	for rows.Next() {
		r := row{ref: objects.Ref{Kind: kind}}
		if err := rows.Scan(&r.ref.Namespace, &r.ref.Name, &r.uid, &r.keyID, &r.raw); err != nil {
			rows.Close()
			return err
		}
		all = append(all, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range all {
		raw, err := s.plain(r.ref, r.uid, r.keyID, r.raw)
		if err != nil {
			return err
		}
		if err := fn(raw); err != nil {
			return fmt.Errorf("stored %s: %w", r.ref, err)
		}
	}
	return nil
}

// plain is a row's object JSON, a Secret's opened.
func (s *Store) plain(ref objects.Ref, uid, keyID string, raw []byte) ([]byte, error) {
	if keyID == "" {
		if ref.Kind == objects.Secret {
			return nil, fmt.Errorf("%s: stored without a key", ref)
		}
		return raw, nil
	}
	plain, err := s.keys.Load().open(keyID, raw, aad(ref, uid))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return plain, nil
}

// aad binds a sealed Secret to its namespace, name and uid: a row copied
// over another's does not open.
func aad(ref objects.Ref, uid string) []byte {
	return []byte(ref.Namespace + "/" + ref.Name + "/" + uid)
}

// Delete deletes an object (its events are workloaddb's). Pods that use it see it
// missing, as in Kubernetes: nothing refuses the delete.
func (s *Store) Delete(ref objects.Ref) error {
	res, err := s.db.Exec(`DELETE FROM config_objects WHERE kind = ? AND namespace = ? AND name = ?`, ref.Kind, ref.Namespace, ref.Name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &objects.NotFoundError{Ref: ref}
	}
	s.changed([]objects.Ref{ref})
	return nil
}

// Unreadable counts the stored Secrets no key of the store opens, and
// names the key of one of them ("" when there are none).
func (s *Store) Unreadable() (int, string, error) {
	rows, err := s.db.Query(`SELECT key_id, COUNT(*) FROM config_objects WHERE kind = ? GROUP BY key_id`, objects.Secret)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	n, id := 0, ""
	keys := s.keys.Load()
	for rows.Next() {
		var kid string
		var c int
		if err := rows.Scan(&kid, &c); err != nil {
			return 0, "", err
		}
		if !keys.has(kid) {
			n, id = n+c, kid
		}
	}
	return n, id, rows.Err()
}

// CountSecrets is the number of stored Secrets.
func (s *Store) CountSecrets() (int, error) {
	var n int
	err := s.db.QueryRow(`SELECT COUNT(*) FROM config_objects WHERE kind = ?`, objects.Secret).Scan(&n)
	return n, err
}
