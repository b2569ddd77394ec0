package store

import (
	"database/sql"
	"errors"
	"fmt"
)

// The hub's ConfigMaps and Secrets are kept as the hub sent them: the
// signed index, and each object's message with its data still sealed for
// this device. Nothing decrypted is ever written here; the agent opens
// them into memory.

// ObjectIndex returns the stored object index; ok is false when there is
// none.
func (s *Store) ObjectIndex() (doc []byte, ok bool, err error) {
	err = s.db.QueryRow(`SELECT document FROM hub_object_index WHERE id = 1`).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("stored object index: %w", err)
	}
	return doc, true, nil
}

// SetObjectIndex stores an index and deletes every object whose key
// keep refuses, in one transaction: no object outlives its index entry
// (whether or not the device could open it). It returns the keys deleted.
func (s *Store) SetObjectIndex(generation int64, doc []byte, keep func(key string) bool) ([]string, error) {
	tx, err := s.db.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO hub_object_index (id, generation, document) VALUES (1, ?, ?)
		ON CONFLICT(id) DO UPDATE SET generation = excluded.generation, document = excluded.document`, generation, doc); err != nil {
		return nil, fmt.Errorf("storing object index generation %d: %w", generation, err)
	}
	rows, err := tx.Query(`SELECT key FROM hub_objects`)
	if err != nil {
		return nil, fmt.Errorf("storing object index generation %d: %w", generation, err)
	}
	var drop []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("storing object index generation %d: %w", generation, err)
		}
		if !keep(k) {
			drop = append(drop, k)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storing object index generation %d: %w", generation, err)
	}
	for _, k := range drop {
		if _, err := tx.Exec(`DELETE FROM hub_objects WHERE key = ?`, k); err != nil {
			return nil, fmt.Errorf("dropping object %s: %w", k, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("storing object index generation %d: %w", generation, err)
	}
	return drop, nil
}

// SaveObject stores an object's message as received, replacing the one
// stored under the same key (kind/namespace/name).
func (s *Store) SaveObject(key string, message []byte) error {
	if _, err := s.db.Exec(`INSERT INTO hub_objects (key, message) VALUES (?, ?)
		ON CONFLICT(key) DO UPDATE SET message = excluded.message`, key, message); err != nil {
		return fmt.Errorf("storing object %s: %w", key, err)
	}
	return nil
}

// DeleteObject deletes the object stored under key, if any.
func (s *Store) DeleteObject(key string) error {
	if _, err := s.db.Exec(`DELETE FROM hub_objects WHERE key = ?`, key); err != nil {
		return fmt.Errorf("dropping object %s: %w", key, err)
	}
	return nil
}

// Objects returns every stored object's message by key.
func (s *Store) Objects() (map[string][]byte, error) {
	rows, err := s.db.Query(`SELECT key, message FROM hub_objects`)
	if err != nil {
		return nil, fmt.Errorf("stored objects: %w", err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var k string
		var m []byte
		if err := rows.Scan(&k, &m); err != nil {
			return nil, fmt.Errorf("stored objects: %w", err)
		}
		out[k] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stored objects: %w", err)
	}
	return out, nil
}
