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
// synopsis's " | "-separated forms after prog, then the flags.
func For(prog, synopsis string, fs *flag.FlagSet) Help {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s %s\n", prog, strings.ReplaceAll(synopsis, " | ", "\n  "+prog+" "))
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
