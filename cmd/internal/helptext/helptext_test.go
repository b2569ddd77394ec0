package helptext

import (
	"flag"
	"strings"
	"testing"
)

// usageLines are the lines of h's "Usage:" block.
func usageLines(h Help) []string {
	block, _, _ := strings.Cut(strings.TrimPrefix(h.Text, "Usage:\n"), "\n\n")
	return strings.Split(strings.TrimSuffix(block, "\n"), "\n")
}

// Each form of a synopsis is one line; a "|" between alternatives inside
// brackets or parentheses belongs to its form and does not break it.
func TestForPrintsEachFormWhole(t *testing.T) {
	for _, c := range []struct {
		synopsis string
		want     []string
	}{
		{"serve [--mqtt-listen HOST:PORT | --broker URL] [--device-timeout 90s]",
			[]string{"  hub serve [--mqtt-listen HOST:PORT | --broker URL] [--device-timeout 90s]"}},
		{"get devices [-o json|yaml] | get pods (-A | --device ID) [-o json|yaml|wide]",
			[]string{"  hub get devices [-o json|yaml]", "  hub get pods (-A | --device ID) [-o json|yaml|wide]"}},
		{"apply -f FILE [--device ID | --selector k=v[,k=v]] | apply --help",
			[]string{"  hub apply -f FILE [--device ID | --selector k=v[,k=v]]", "  hub apply --help"}},
		{"describe device ID | describe deployment|daemonset NAME",
			[]string{"  hub describe device ID", "  hub describe deployment|daemonset NAME"}},
		{"version", []string{"  hub version"}},
	} {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		got := usageLines(For("hub", c.synopsis, fs))
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("For(%q) usage:\n%s\nwant:\n%s", c.synopsis, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// The flags follow the usage, after a blank line.
func TestForListsTheFlags(t *testing.T) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.String("out", "", "where the bundle goes")
	h := For("hub", "cmd [--out DIR]", fs)
	if !strings.Contains(h.Text, "\n\nFlags:\n  -out string\n") || !strings.Contains(h.Text, "where the bundle goes") {
		t.Errorf("help without its flags:\n%s", h.Text)
	}
}
