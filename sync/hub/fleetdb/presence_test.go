package fleetdb

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// ForgetPresenceAlone forgets only when no replica other than the
// caller's ID is live on the database's clock: a row of its own ID (a
// process of it killed and started again) or an expired one does not
// count.
func TestForgetPresenceAloneOnlyWithoutOtherLiveReplicas(t *testing.T) {
	f, err := OpenStore(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.AddDevice("d"); err != nil {
		t.Fatal(err)
	}
	dbNow := "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)"
	for _, c := range []struct {
		name    string
		id      string
		expires string // SQL, on the database's clock
		forget  bool
	}{
		{"another replica live", "other", dbNow + " + 60000", false},
		{"another replica expired", "other", dbNow + " - 1", true},
		{"a live row of the caller's own ID", "me", dbNow + " + 60000", true},
	} {
		if _, err := f.db.Exec(`DELETE FROM replicas`); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.Exec(`INSERT INTO replicas (id, nonce, started, heartbeat, expires) VALUES ($1, 'n', 0, 0, `+c.expires+`)`, c.id); err != nil {
			t.Fatal(err)
		}
		if _, err := f.SavePresence("d", &protocol.Presence{Device: "d", Online: true}, time.Now()); err != nil {
			t.Fatal(err)
		}
		forgot, err := f.ForgetPresenceAlone("me")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d, err := f.GetDevice("d", time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if forgot != c.forget || d.Online == c.forget {
			t.Errorf("%s: forgot %v, device online %v; want forgot %v", c.name, forgot, d.Online, c.forget)
		}
	}
}
