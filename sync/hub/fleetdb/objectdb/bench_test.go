package objectdb_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// What sealing costs an apply and opening a read: a 4 KiB Secret
// changed and stored, then read back.
func BenchmarkSecretApplyAndGet(b *testing.B) {
	dir := b.TempDir()
	key, err := objectdb.CreateKeyFile(filepath.Join(dir, "secrets.key"))
	if err != nil {
		b.Fatal(err)
	}
	f, err := fleetdb.Open(filepath.Join(dir, "fleet.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := objectdb.New(f.SQL())
	s.SetKeys(objectdb.NewKeyring(key))
	value := strings.Repeat("v", 4096)
	ref := objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}
	now := time.Now()
	b.ResetTimer()
	for i := range b.N {
		objs, err := kinds.Decode("b.yaml", []byte(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {k: %s%d}\n", value, i)))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Apply(objs, now, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Get(ref); err != nil {
			b.Fatal(err)
		}
	}
}
