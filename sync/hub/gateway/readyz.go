package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// Health answers the health endpoints, open to anyone: /livez and
// /healthz ok while podhub serves, /readyz ok when every check of ready
// passes (nil: always), else 500 with the API server's body and each
// failure's reason in log. The HTTPS listener serves it, and podhub's
// plain health listener (--health-listen) serves nothing else.
func Health(ready func() []Check, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/livez", "/readyz":
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path == "/readyz" && ready != nil {
			checks := ready()
			if body, ok := readyz(checks); !ok {
				// The reasons for the log: the open endpoint withholds them.
				for _, c := range checks {
					if c.Err != nil && log != nil {
						log.Warn("readyz check failed", "check", c.Name, "err", c.Err)
					}
				}
				http.Error(w, body, http.StatusInternalServerError)
				return
			}
		}
		w.Write([]byte("ok"))
	})
}

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
