package workloaddb_test

import (
	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
)

// The tests run against both stores (pgtest.EachStore): the PostgreSQL
// server they share stops when they end.
func TestMain(m *testing.M) { pgtest.Main(m) }
