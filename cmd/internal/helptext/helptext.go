// Package helptext builds the --help text of podvisor's and podhub's
// commands, so both print it the same way.
package helptext

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Help is what a command returns for --help: its usage, which the
// caller prints on stdout with exit code 0.
type Help struct{ Text string }

func (h Help) Error() string { return h.Text }

// For is the usage of the command whose flag set is fs: each of the
// synopsis's " | "-separated forms on a line of its own after prog, then
// the flags.
func For(prog, synopsis string, fs *flag.FlagSet) Help {
	var b strings.Builder
	b.WriteString("Usage:\n")
	for _, form := range forms(synopsis) {
		fmt.Fprintf(&b, "  %s %s\n", prog, form)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nFlags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return Help{b.String()}
}

// forms splits a synopsis at the " | " that separate its forms. A " | "
// inside brackets or parentheses ([--mqtt-listen HOST:PORT | --broker
// URL]) separates a flag's alternatives within one form and stays.
func forms(synopsis string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(synopsis); i++ {
		switch synopsis[i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '|':
			if depth == 0 && i > 0 && strings.HasPrefix(synopsis[i-1:], " | ") {
				out = append(out, synopsis[start:i-1])
				start = i + 2
			}
		}
	}
	return append(out, synopsis[start:])
}
