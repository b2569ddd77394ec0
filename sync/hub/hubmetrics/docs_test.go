package hubmetrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every family the hub writes is documented, in docs/hub-metrics.md or
// in docs/metrics.md once the two are one page.
func TestEveryFamilyDocumented(t *testing.T) {
	var docs strings.Builder
	for _, name := range []string{"hub-metrics.md", "metrics.md"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
		if err == nil {
			docs.Write(raw)
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	for _, f := range Families() {
		if !strings.Contains(docs.String(), "`"+f.Name+"`") {
			t.Errorf("%s is in neither docs/hub-metrics.md nor docs/metrics.md", f.Name)
		}
	}
}
