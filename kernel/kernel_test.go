package kernel

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func parseFile(t *testing.T, path string) Config {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return c
}

func TestMinimalGatewayKernel(t *testing.T) {
	c := parseFile(t, "testdata/minimal.config")
	if c.Version != (Version{5, 4}) {
		t.Errorf("version = %v, want 5.4 from the header", c.Version)
	}
	if got := c.Values["CONFIG_CMDLINE"]; got != `"console=ttyS0,115200"` {
		t.Errorf("string option = %q", got)
	}
	findings := Check(c, Requirements)
	missing := map[string]Need{}
	for _, f := range findings {
		if f.Missing() {
			missing[f.Option] = f.Need
		}
		if f.Option == "CONFIG_OVERLAY_FS" && f.Value != "m" {
			t.Errorf("overlayfs as a module: value %q, want m", f.Value)
		}
	}
	for opt, need := range map[string]Need{
		"CONFIG_CGROUP_SCHED": Required, "CONFIG_PSI": Recommended, "CONFIG_PID_NS": Recommended,
		"CONFIG_BPF_SYSCALL": Recommended, "CONFIG_VETH": Containerd,
	} {
		if got, ok := missing[opt]; !ok || got != need {
			t.Errorf("%s: missing=%v need=%v, want missing %v", opt, ok, got, need)
		}
	}
	if _, ok := missing["CONFIG_MEMCG"]; ok {
		t.Error("CONFIG_MEMCG=y reported missing")
	}

	var out bytes.Buffer
	failing := Report(&out, "minimal.config", c, findings, false)
	if failing != 1 { // CGROUP_SCHED alone: the containerd options do not fail without --containerd
		t.Errorf("failing = %d, want 1\n%s", failing, out.String())
	}
	if !strings.Contains(out.String(), "MISSING  CONFIG_CGROUP_SCHED") || !strings.Contains(out.String(), "every container gets the same CPU share") {
		t.Errorf("report does not name the missing option and its cost:\n%s", out.String())
	}
	if withCtrd := Report(&bytes.Buffer{}, "x", c, findings, true); withCtrd <= failing {
		t.Errorf("with containerd expected, failing = %d, want more than %d", withCtrd, failing)
	}
}

func TestAnyOfTakesTheOptionPresent(t *testing.T) {
	c := Config{Values: map[string]string{"CONFIG_NF_NAT_IPV4": "m", "CONFIG_NF_NAT": "n"}}
	f := Check(c, []Requirement{{AnyOf: []string{"CONFIG_NF_NAT", "CONFIG_NF_NAT_IPV4"}}})[0]
	if f.Missing() || f.Option != "CONFIG_NF_NAT_IPV4" || f.Value != "m" {
		t.Errorf("finding = %+v", f)
	}
}

func TestOldKernelFails(t *testing.T) {
	c := Config{Values: map[string]string{}, Version: Version{4, 19}}
	var out bytes.Buffer
	if n := Report(&out, "old", c, nil, false); n != 1 || !strings.Contains(out.String(), "no pidfd_open") {
		t.Errorf("failing = %d, report:\n%s", n, out.String())
	}
}

func TestParseRefusesWhatIsNotAConfig(t *testing.T) {
	for name, in := range map[string]string{
		"passwd":  "root:x:0:0:root:/root:/bin/sh\n",
		"empty":   "",
		"comment": "# just a comment\n",
		"long":    "CONFIG_X=" + strings.Repeat("a", maxLine+1) + "\n",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func TestBootParamsPSI(t *testing.T) {
	c := Config{Values: map[string]string{"CONFIG_PSI": "y", "CONFIG_PSI_DEFAULT_DISABLED": "y"}}
	if w := BootParams(c, "console=ttyS0 quiet"); len(w) != 1 || !strings.Contains(w[0], "psi=1") {
		t.Errorf("PSI disabled by default without psi=1: %v", w)
	}
	if w := BootParams(c, "quiet psi=1"); len(w) != 0 {
		t.Errorf("psi=1 given: %v", w)
	}
	if w := BootParams(Config{Values: map[string]string{"CONFIG_PSI": "y"}}, "psi=0 cgroup_disable=memory"); len(w) != 2 {
		t.Errorf("psi=0 and cgroup_disable=memory: %v", w)
	}
}
