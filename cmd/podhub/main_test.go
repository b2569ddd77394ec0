package main

import (
	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
)

// Tests of the fleet store run on SQLite and PostgreSQL
// (pgtest.EachStore): the PostgreSQL server they share stops when they
// end.
func TestMain(m *testing.M) { pgtest.Main(m) }
