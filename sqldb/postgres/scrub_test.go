package postgres

import (
	"errors"
	"strings"
	"testing"
)

// Scrub takes a URL's passwords out of an error, as written and decoded.
func TestScrub(t *testing.T) {
	for _, url := range []string{
		"postgres://podhub:p%40ss%20word@db/fleet",
		"postgres://podhub@db/fleet?password=p%40ss%20word",
	} {
		err := Scrub(errors.New("failed: p@ss word, p%40ss%20word"), url)
		if strings.Contains(err.Error(), "ss") || strings.Count(err.Error(), "xxxxx") != 2 {
			t.Errorf("%s: %v", Mask(url), err)
		}
	}
	if Scrub(nil, "postgres://u:pw@db/x") != nil {
		t.Error("Scrub(nil) is not nil")
	}
}
