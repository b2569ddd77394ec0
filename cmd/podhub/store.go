package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// storeOf is the fleet store cfg names (store: of podhub.yaml or
// --store), else the data directory's fleet.db; a relative SQLite path
// is under the data directory, as podhub.yaml is.
func (c *cli) storeOf(cfg config) string {
	s := cfg.Store
	switch {
	case s == "":
		return c.path("fleet.db")
	case strings.HasPrefix(s, "sqlite:"):
		s = strings.TrimPrefix(strings.TrimPrefix(s, "sqlite:"), "//")
	case postgres.IsURL(s), strings.Contains(s, "://"):
		return s // PostgreSQL, or what OpenStore refuses with its reason
	}
	path := s
	if !filepath.IsAbs(path) {
		path = c.path(path)
	}
	return path
}

// storeName is how a store is shown: a URL without its password.
func storeName(store string) string {
	if strings.Contains(store, "://") {
		return postgres.Mask(store)
	}
	return store
}

// openFleet opens the fleet store cfg names. An SQLite file is created
// private: it holds every device's desired pods, secrets included.
func (c *cli) openFleet(cfg config) (*fleetdb.Fleet, error) {
	store := c.storeOf(cfg)
	if strings.Contains(store, "://") {
		return fleetdb.OpenStore(store) // its errors mask the password
	}
	f, err := os.OpenFile(store, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fleet database: %w", err)
	}
	f.Close()
	for _, p := range []string{store, store + "-wal", store + "-shm", store + "-journal"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("fleet database: %w", err)
		}
	}
	return fleetdb.Open(store)
}
