package postgres

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/linked"
)

// PostgreSQL is podhub's store only: the device daemon links neither
// this package nor pgx (its binary size is a budget).
func TestDaemonDoesNotLinkPostgres(t *testing.T) {
	for _, pkg := range linked.Packages(t, "github.com/podvisor/podvisor/cmd/podvisor") {
		if strings.HasPrefix(pkg, "github.com/jackc/") || pkg == "github.com/podvisor/podvisor/sqldb/postgres" {
			t.Errorf("podvisor links %s", pkg)
		}
	}
}
