package fleetdb

import (
	"fmt"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/replica"
)

// ForgetPresenceAlone marks every device offline, as ForgetPresence,
// unless a replica other than replica me is live in the replicas' table
// (its row unexpired on the database's clock): on PostgreSQL, where
// several replicas share the fleet, a replica calls it before it joins
// (replica.Elector.BeforeJoin). The replicas' table is locked against
// joins (SHARE) while the statement runs, so a replica that joins at the
// same time either is seen, and nothing is forgotten, or joins after the
// devices were marked offline, and stores the presence it hears after
// that: what a live replica stored is never marked offline. It reports
// whether it forgot.
func (f *Fleet) ForgetPresenceAlone(me string) (bool, error) {
	if f.dialect != sqldb.Postgres {
		return false, fmt.Errorf("forgetting the presence unless other replicas live: PostgreSQL only (store is %v)", f.dialect)
	}
	tx, err := f.db.Begin()
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	others, err := replica.OthersLiveLocked(tx, me)
	if err != nil {
		return false, fmt.Errorf("forgetting the presence: %w", err)
	}
	if others > 0 {
		return false, nil
	}
	if _, err := tx.Exec(`UPDATE devices SET online = 0 WHERE online <> 0`); err != nil {
		return false, fmt.Errorf("forgetting the presence: %w", err)
	}
	if err := f.commit(tx, fleetwatch.Note{What: fleetwatch.Node}); err != nil {
		return false, err
	}
	f.changes.Deliver("", fleetwatch.Node)
	return true, nil
}
