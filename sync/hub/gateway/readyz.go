package gateway

import (
	"fmt"
	"strings"
)

// Check is one readiness check's outcome: its name and nil if it
// passes.
type Check struct {
	Name string
	Err  error
}

// readyz is /readyz's answer to checks: ok when all pass, else the API
// server's failure body (each check [+] or [-], the reason withheld from
// an unauthenticated reader, then "readyz check failed"), for a 500.
func readyz(checks []Check) (string, bool) {
	var b strings.Builder
	ok := true
	for _, c := range checks {
		if c.Err == nil {
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			continue
		}
		ok = false
		fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c.Name)
	}
	if ok {
		return "ok", true
	}
	b.WriteString("readyz check failed")
	return b.String(), false
}
