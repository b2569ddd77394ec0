package kernel

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Version is a kernel's major and minor number.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || (v.Major == w.Major && v.Minor < w.Minor)
}

// Config is a parsed kernel configuration.
type Config struct {
	// Values maps an option to "y", "m" or its value; options "is not set"
	// map to "n"; options absent from the file are absent here.
	Values map[string]string
	// Version is read from the header comment ("# Linux/arm64 6.1.0 Kernel
	// Configuration"); zero when the file has none.
	Version Version
}

var (
	setLine    = regexp.MustCompile(`^(CONFIG_[A-Za-z0-9_]+)=(.*)$`)
	unsetLine  = regexp.MustCompile(`^# (CONFIG_[A-Za-z0-9_]+) is not set$`)
	headerLine = regexp.MustCompile(`^# Linux/\S+ (\d+)\.(\d+)`)
)

// maxLine bounds one line: a real .config has none near it.
const maxLine = 64 << 10

// Parse reads a kernel .config. A line it does not understand is an error
// naming the line, so a file that is not a kernel config is not taken for
// one that lacks everything.
func Parse(r io.Reader) (Config, error) {
	c := Config{Values: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case setLine.MatchString(line):
			m := setLine.FindStringSubmatch(line)
			c.Values[m[1]] = m[2]
		case unsetLine.MatchString(line):
			c.Values[unsetLine.FindStringSubmatch(line)[1]] = "n"
		case strings.HasPrefix(line, "#"):
			if m := headerLine.FindStringSubmatch(line); m != nil && c.Version == (Version{}) {
				c.Version.Major, _ = strconv.Atoi(m[1])
				c.Version.Minor, _ = strconv.Atoi(m[2])
			}
		default:
			return Config{}, fmt.Errorf("line %d: not a kernel config line: %.60q", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, fmt.Errorf("line %d: %w", n+1, err)
	}
	if len(c.Values) == 0 {
		return Config{}, fmt.Errorf("no CONFIG_ options: not a kernel config")
	}
	return c, nil
}

// Finding is the verdict on one requirement.
type Finding struct {
	Requirement
	// Option is the option that satisfied it, or the first of AnyOf.
	Option string
	// Value is "y", "m" (a module: it must be loaded or auto-loadable)
	// or "" when missing.
	Value string
}

// Missing reports whether no option of the requirement is set.
func (f Finding) Missing() bool { return f.Value == "" }

// Check judges every requirement against the config.
func Check(c Config, reqs []Requirement) []Finding {
	out := make([]Finding, 0, len(reqs))
	for _, r := range reqs {
		f := Finding{Requirement: r, Option: r.AnyOf[0]}
		for _, opt := range r.AnyOf {
			if v := c.Values[opt]; v != "" && v != "n" {
				f.Option, f.Value = opt, v
				break
			}
		}
		out = append(out, f)
	}
	return out
}

// BootParams are what the running kernel's command line changes about the
// config: PSI built with CONFIG_PSI_DEFAULT_DISABLED is off unless psi=1.
func BootParams(c Config, cmdline string) []string {
	var warn []string
	psiOn := c.Values["CONFIG_PSI_DEFAULT_DISABLED"] != "y"
	for _, f := range strings.Fields(cmdline) {
		switch f {
		case "psi=1":
			psiOn = true
		case "psi=0":
			psiOn = false
		}
	}
	if c.Values["CONFIG_PSI"] == "y" && !psiOn {
		warn = append(warn, "PSI is built but off: add psi=1 to the kernel command line (memory pressure is otherwise seen only by the periodic check)")
	}
	if strings.Contains(" "+cmdline+" ", " cgroup_disable=memory ") {
		warn = append(warn, "cgroup_disable=memory on the kernel command line turns memory limits off")
	}
	return warn
}

// Report writes the findings, one line each, and a summary. It returns the
// number of requirements missing that fail the check: Required ones, and
// Containerd ones when containerd pods are expected.
func Report(w io.Writer, source string, c Config, findings []Finding, containerd bool) int {
	version := "unknown version"
	if c.Version != (Version{}) {
		version = "Linux " + c.Version.String()
	}
	fmt.Fprintf(w, "kernel config: %s (%s)\n", source, version)
	failing := 0
	if c.Version != (Version{}) && c.Version.Less(MinVersion) {
		failing++
		fmt.Fprintf(w, "%-8s %-28s %-11s kernel %s is older than %s: no pidfd_open, so exits cannot be waited for without polling\n",
			"MISSING", "version >= "+MinVersion.String(), Required, c.Version, MinVersion)
	}
	for _, f := range findings {
		status, note := "ok", f.For
		if f.Missing() {
			status, note = "MISSING", f.Cost
			if f.Need == Required || (f.Need == Containerd && containerd) {
				failing++
			}
		} else if f.Value == "m" {
			status, note = "module", f.For+" (load the module or let it auto-load)"
		}
		fmt.Fprintf(w, "%-8s %-28s %-11s %s\n", status, f.Option, f.Need, note)
	}
	missing := 0
	for _, f := range findings {
		if f.Missing() {
			missing++
		}
	}
	fmt.Fprintf(w, "%d of %d options missing, %d of them failing the check\n", missing, len(findings), failing)
	return failing
}
