package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := strings.Join([]string{
		`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
		`25 30 0:22 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate`,
		`26 30 0:23 / /sys/fs/cgroup/cpu,cpuacct rw shared:10 - cgroup cgroup rw,cpu,cpuacct`,
		`40 36 0:50 / /tmp/a\040b\134c\04 rw - tmpfs my\040fs rw`,
		`41 36 0:51 / /no/separator rw shared:1 tmpfs tmpfs rw`,
		`42 36 0:52 / /short rw - tmpfs`,
		`garbage`,
		``,
	}, "\n")
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{ID: "36", Parent: "35", Root: "/mnt1", Point: "/mnt2", Options: "rw,noatime", FSType: "ext3", Source: "/dev/root", SuperOptions: "rw,errors=continue"},
		{ID: "25", Parent: "30", Root: "/", Point: "/sys/fs/cgroup/unified", Options: "rw,nosuid", FSType: "cgroup2", Source: "cgroup2", SuperOptions: "rw,nsdelegate"},
		{ID: "26", Parent: "30", Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", Options: "rw", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,cpu,cpuacct"},
		{ID: "40", Parent: "36", Root: "/", Point: `/tmp/a b\c\04`, Options: "rw", FSType: "tmpfs", Source: "my fs", SuperOptions: "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mounts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadSelf(t *testing.T) {
	ms, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Point == "/" {
			return
		}
	}
	t.Fatalf("no mount at / among %d", len(ms))
}

func FuzzParseLine(f *testing.F) {
	f.Add(`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`)
	f.Add(`1 2 3 4 5 6 - \`)
	f.Fuzz(func(t *testing.T, line string) {
		if m, ok := ParseLine(line); ok && m.FSType == "" {
			t.Fatalf("%q: parsed without a file system type", line)
		}
	})
}
