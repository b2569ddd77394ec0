package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
)

// secretsKeyPath is the key file Secrets are sealed with: secretsKeyFile
// of podhub.yaml (a relative path is under the data directory, as
// podhub.yaml is), or <data-dir>/secrets.key. It lives outside fleet.db,
// so that a copy of the database alone shows no Secret.
func (c *cli) secretsKeyPath(cfg config) string {
	switch {
	case cfg.SecretsKeyFile == "":
		return c.path("secrets.key")
	case filepath.IsAbs(cfg.SecretsKeyFile):
		return cfg.SecretsKeyFile
	}
	return c.path(cfg.SecretsKeyFile)
}

// initSecretsKey makes the secrets key if there is none; it returns the
// file it made ("" for none).
func (c *cli) initSecretsKey() (string, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return "", err
	}
	path := c.secretsKeyPath(cfg)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if _, err := objectdb.CreateKeyFile(path); err != nil {
		return "", err
	}
	return path, nil
}

// loadSecretsKey gives the objects' store its key. A hub initialised
// before Secrets were kept gets one now, unless fleet.db already holds
// Secrets (their key file is then missing: refused, not replaced).
func (c *cli) loadSecretsKey(cfg config, store *objectdb.Store, log *slog.Logger) error {
	path := c.secretsKeyPath(cfg)
	key, err := objectdb.ReadKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		n, cerr := store.CountSecrets()
		if cerr != nil {
			return cerr
		}
		if n > 0 {
			return fmt.Errorf("secrets key file %s is missing, but fleet.db holds %d Secret(s) sealed with a key: restore the file, or set secretsKeyFile in podhub.yaml to where it is", path, n)
		}
		if key, err = objectdb.CreateKeyFile(path); err == nil {
			log.Info("made the secrets key Secrets are sealed with at rest", "file", path, "key", key.ID)
		}
	}
	if err != nil {
		return err
	}
	store.SetKeys(objectdb.NewKeyring(key))
	if n, id, err := store.Unreadable(); err != nil {
		return err
	} else if n > 0 {
		log.Error("Secrets sealed under another key cannot be read or updated until that key is back (they may be deleted)",
			"secrets", n, "sealedWith", id, "keyFile", path, "key", key.ID)
	}
	return nil
}
