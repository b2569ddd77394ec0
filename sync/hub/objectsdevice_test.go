package hub_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/sync/uplink"
)

// With the device's own agent (sync/uplink): a ConfigMap and a Secret
// applied at the hub are the device's, opened with its key, once its pod
// references them; a ConfigMap applied changed is the device's at its
// new version, the daemon told (its time logged; 2 s end to end is the
// volume e2e test's bound).
func TestDeviceAgentGetsAppliedObjects(t *testing.T) {
	r := newRig(t)
	key, _ := objectdb.NewKey(bytes.Repeat([]byte{9}, objectdb.KeySize), "test")
	r.hub.Objects().SetKeys(objectdb.NewKeyring(key))
	sealKey, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changedAt time.Time
	a, _, _ := r.deviceWith("gw-1", filepath.Join(r.dir, "device.db"), &fakePods{}, func(c *uplink.Config) {
		c.SealKey = sealKey
		c.OnObjectsChanged = func([]objects.Ref) {
			mu.Lock()
			changedAt = time.Now()
			mu.Unlock()
		}
	})
	apply := func(yaml string) {
		t.Helper()
		objs, err := kinds.Decode("objects.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.hub.Objects().Apply(objs, time.Now(), nil); err != nil {
			t.Fatal(err)
		}
	}
	cm := func(level string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  level: \"" + level + "\"\n"
	}
	apply(cm("1") + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: " + marker + "\n")
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{cmPod("web", "app", "db")}); err != nil {
		t.Fatal(err)
	}
	value := func(kind objects.Kind, name, key string) string {
		o, err := a.Objects().Get(objects.Ref{Kind: kind, Namespace: "default", Name: name})
		if err != nil {
			return ""
		}
		return string(o.Data[key])
	}
	eventually(t, 10*time.Second, "the ConfigMap and the Secret at the device", func() bool {
		return value(objects.ConfigMap, "app", "level") == "1" && value(objects.Secret, "db", "password") == marker
	})
	start := time.Now()
	apply(cm("2"))
	eventually(t, 10*time.Second, "the changed ConfigMap at the device, the daemon told", func() bool {
		mu.Lock()
		told := changedAt.After(start)
		mu.Unlock()
		return told && value(objects.ConfigMap, "app", "level") == "2"
	})
	mu.Lock()
	took := changedAt.Sub(start)
	mu.Unlock()
	t.Logf("ConfigMap applied changed → the device's agent has it and tells the daemon in %v", took)
}
