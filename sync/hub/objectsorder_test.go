package hub_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
)

// A device's object index that lists its new pods' objects is published
// before the desired document that brings the pods (the device knows
// they are on their way when the pods come); an index that drops the
// objects of removed pods comes after the document that removes them
// (the pods keep their objects until they are gone). A change that adds
// and removes at once gives both: the union before, the rest after.
func TestIndexBeforeTheDesiredDocument(t *testing.T) {
	r := newTLSRig(t)
	a := r.device("gw-a")
	var mu sync.Mutex
	var seen []string
	// A document again (the hub's republishing at its connection, a
	// subscription's retained copy) is no new step: the device ignores it.
	note := func(s string) {
		mu.Lock()
		if !slices.Contains(seen, s) {
			seen = append(seen, s)
		}
		mu.Unlock()
	}
	a.subscribe(protocol.Topics{}.Device("gw-a", protocol.KindDesired), func(m mqtt.Message) {
		d, err := protocol.OpenDesired(m.Payload(), "gw-a", r.pub, false)
		if err != nil {
			t.Errorf("desired: %v", err)
			return
		}
		var names []string
		for _, p := range d.Pods {
			var meta struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			json.Unmarshal(p, &meta)
			names = append(names, meta.Metadata.Name)
		}
		note(fmt.Sprintf("desired %d [%s]", d.Generation, strings.Join(names, " ")))
	})
	a.subscribe(protocol.Topics{}.Device("gw-a", protocol.KindObjects), func(m mqtt.Message) {
		ix, err := protocol.OpenObjectIndex(m.Payload(), "gw-a", r.pub)
		if err != nil {
			t.Errorf("index: %v", err)
			return
		}
		var names []string
		for _, e := range ix.Entries {
			names = append(names, e.Name)
		}
		note(fmt.Sprintf("index %d [%s]", ix.Generation, strings.Join(names, " ")))
	})
	r.src.set(objects.Secret, "db", "1", map[string]string{"password": "x"})
	r.src.set(objects.ConfigMap, "app", "1", map[string]string{"app.conf": "level=1"})
	r.src.set(objects.Secret, "reg", "1", map[string]string{"password": "y"})
	steps := []struct {
		do   func() (int64, error)
		want []string
	}{
		{func() (int64, error) { return r.hub.Apply("gw-a", []json.RawMessage{objPod("web", "db")}) },
			[]string{"index 1 [db]", "desired 1 [web]"}},
		{func() (int64, error) { return r.hub.Apply("gw-a", []json.RawMessage{cmPod("api", "app", "reg")}) },
			[]string{"index 2 [app db reg]", "desired 2 [web api]"}},
		// Only a removal: the document first, then the index without db.
		{func() (int64, error) { return r.hub.Delete("gw-a", "default", "web") },
			[]string{"desired 3 [api]", "index 3 [app reg]"}},
		// api made again with another object: db before, app and reg after.
		{func() (int64, error) { return r.hub.Apply("gw-a", []json.RawMessage{objPod("api", "db")}) },
			[]string{"index 4 [app db reg]", "desired 4 [api]", "index 5 [db]"}},
	}
	var want []string
	for i, s := range steps {
		if _, err := s.do(); err != nil {
			t.Fatal(err)
		}
		want = append(want, s.want...)
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			if n >= len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond) // waiting for the device's messages
		}
		mu.Lock()
		got := strings.Join(seen, "; ")
		mu.Unlock()
		if got != strings.Join(want, "; ") {
			t.Fatalf("step %d: the device saw\n  %s\nwant\n  %s", i, got, strings.Join(want, "; "))
		}
	}
}
