package fleetdb

import (
	"fmt"
	"testing"
)

// mergeLabels: the device's own labels, then the operator's over them,
// in the one map it is given; a null adds nothing and keeps the map.
func TestMergeLabels(t *testing.T) {
	for _, c := range []struct {
		own, operator string
		want          string
	}{
		{`{"podvisor.io/site":"north"}`, `{"fleet":"bench"}`, "map[fleet:bench podvisor.io/site:north]"},
		{`{"podvisor.io/site":"north"}`, `{"podvisor.io/site":"south"}`, "map[podvisor.io/site:south]"},
		{`null`, `{"fleet":"bench"}`, "map[fleet:bench]"},
		{`{"podvisor.io/site":"north"}`, `null`, "map[podvisor.io/site:north]"},
		{`{}`, `{}`, "map[]"},
	} {
		into := map[string]string{"left": "over"}
		clear(into)
		mergeLabels(into, []byte(c.own), []byte(c.operator))
		if got := fmt.Sprint(into); got != c.want {
			t.Errorf("own %s, operator %s: %s, want %s", c.own, c.operator, got, c.want)
		}
	}
}
