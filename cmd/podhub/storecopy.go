package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// store runs the fleet store's commands: copy.
func (c *cli) store(ctx context.Context, args []string) error {
	return runVerb("store", "podhub store copy --to postgres://…", args,
		verb{"copy", func(args []string) error { return c.storeCopy(ctx, args) }})
}

// storeCopy copies the data directory's SQLite fleet store into an
// empty PostgreSQL one (fleetdb.CopyStore), holding the SQLite store's
// lock so that no podhub serve runs on it meanwhile, and says what the
// replicas need beside the store.
func (c *cli) storeCopy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("store copy", flag.ContinueOnError)
	to := fs.String("to", "", "the PostgreSQL store to copy into: postgres://… (its fleet tables empty; the schema is made if missing)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("store copy: unexpected argument %q", pos[0])
	}
	if *to == "" {
		return errors.New("store copy: --to postgres://… is required")
	}
	if !postgres.IsURL(*to) {
		return fmt.Errorf("store copy: --to %s: not a PostgreSQL URL (postgres://… or postgresql://…)", storeName(*to))
	}
	if err := prepareDataDir(c.dataDir, false); err != nil {
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	source := c.sqliteStore(cfg)
	if _, err := os.Stat(source); err != nil {
		return fmt.Errorf("store copy: the SQLite fleet store: %w", err)
	}
	unlock, err := lockSQLiteStore(source)
	if held := (*storeHeldError)(nil); errors.As(err, &held) {
		return fmt.Errorf("store copy: fleet store %s: a podhub serve (%s) runs on it (it holds %s): stop it before the copy", source, held.holder, held.lockPath)
	}
	if err != nil {
		return err
	}
	defer unlock()
	src, err := fleetdb.Open(source)
	if err != nil {
		return err
	}
	defer src.Close()
	target := postgres.Mask(*to)
	dst, err := fleetdb.OpenStore(*to) // its errors mask the password
	if err != nil {
		return fmt.Errorf("store copy: %w", err)
	}
	defer dst.Close()
	start := time.Now()
	copied, err := fleetdb.CopyStore(ctx, dst, src, fleetdb.DefaultCopyBatch)
	if err != nil {
		return fmt.Errorf("store copy to %s: %w (nothing was copied)", target, postgres.Scrub(err, *to))
	}
	fmt.Fprintf(c.out, "copied %s to %s in %s:\n", source, target, time.Since(start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, t := range copied {
		fmt.Fprintf(tw, "%s\t%d\n", t.Table, t.Rows)
	}
	tw.Flush()
	skipped := slices.Sorted(maps.Keys(fleetdb.CopySkipped))
	fmt.Fprintf(c.out, "not copied (each store's own): %s\n\n", strings.Join(skipped, ", "))
	c.printNotInStore(cfg)
	return nil
}

// sqliteStore is the SQLite fleet store of the data directory: the one
// podhub.yaml's store: names, or fleet.db when it names none or a
// PostgreSQL store (the one being copied into).
func (c *cli) sqliteStore(cfg config) string {
	if s := c.storeOf(cfg); !strings.Contains(s, "://") {
		return s
	}
	return c.path("fleet.db")
}

// printNotInStore says what the replicas need that the store does not
// hold: the data directory's keys and files.
func (c *cli) printNotInStore(cfg config) {
	fmt.Fprintf(c.out, "Not in the store: give every replica a copy of these from %s (cp -a, mode kept):\n", c.dataDir)
	tw := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	for _, f := range []struct{ name, why string }{
		{"hub.key, hub.pub", "the hub's signing key: devices trust only what it signed (desired documents, orders, releases)"},
		{"pki/", "the broker's CA, certificates and revocation list: devices' and users' certificates chain to it"},
		{c.inDataDir(c.secretsKeyPath(cfg)), "the key the store's Secrets are sealed with: without it they do not open"},
		{"releases/", "the release artifacts' bytes (the store keeps their manifests)"},
		{"tokens", "the HTTPS listener's bearer tokens (hashed), if any"},
		{"podhub.yaml", "the settings: set store: to the PostgreSQL URL (or pass --store; a password in a passfile)"},
	} {
		fmt.Fprintf(tw, "  %s\t%s\n", f.name, f.why)
	}
	tw.Flush()
	fmt.Fprintln(c.out, "Leave behind fleet.db* (the copy's source: keep it until the replicas run), podhub.sock, the *.lock files,")
	fmt.Fprintln(c.out, "replica-id and replica.nonce (each replica its own; or --replica-id ID).")
	fmt.Fprintln(c.out, "Then on each host: podhub serve --store postgres://… --replica-id ID")
}

// inDataDir is path relative to the data directory when it is in it.
func (c *cli) inDataDir(path string) string {
	if rel, err := filepath.Rel(c.dataDir, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return rel
	}
	return path
}
