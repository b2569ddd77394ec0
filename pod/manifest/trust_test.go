package manifest

import (
	"io/fs"
	"strings"
	"testing"
)

// The trust decision, on made-up stat results: what sshd's StrictModes
// would refuse, with the sticky-parent exception and links' owners.
func TestJudgeTrust(t *testing.T) {
	const dir, sticky, link = fs.ModeDir, fs.ModeDir | fs.ModeSticky, fs.ModeSymlink
	root := func(path string, mode fs.FileMode) pathStep { return pathStep{Path: path, Mode: mode} }
	listed := func(s pathStep) pathStep { s.Listed = true; return s }
	owned := func(uid uint32, s pathStep) pathStep { s.UID = uid; return s }
	// A daemon's usual path: / and /etc root's, 0755, the file 0644.
	base := []pathStep{root("/", dir|0o755), root("/etc", dir|0o755), listed(root("/etc/m", dir|0o755))}
	path := func(steps ...pathStep) []pathStep { return append(append([]pathStep{}, base...), steps...) }
	file := root("/etc/m/web.yaml", 0o644)
	for _, tc := range []struct {
		name  string
		euid  int
		steps []pathStep
		want  string // in the error; "" for trusted
	}{
		{"root's file in root's directories", 0, path(file), ""},
		{"read-only for everyone", 0, path(root("/etc/m/web.yaml", 0o444)), ""},
		{"a file another user owns", 0, path(owned(1000, file)), "file /etc/m/web.yaml is owned by uid 1000, not root"},
		{"the daemon's own user's file", 1000, path(owned(1000, file)), ""},
		{"root's file, daemon not root", 1000, path(file), ""},
		{"another user's, daemon not root", 1000, path(owned(1001, file)), "owned by uid 1001, neither root nor the daemon's uid 1000"},
		{"group-writable file", 0, path(root("/etc/m/web.yaml", 0o664)), "file /etc/m/web.yaml is writable by group or others (mode 0664)"},
		{"world-writable file", 0, path(root("/etc/m/web.yaml", 0o646)), "(mode 0646)"},
		{"sticky bit on a file is no excuse", 0, path(root("/etc/m/web.yaml", fs.ModeSticky|0o666)), "file /etc/m/web.yaml is writable"},
		{"manifest directory group-writable", 0,
			[]pathStep{root("/", dir|0o755), listed(root("/m", dir|0o775)), file},
			"the manifest directory /m is writable by group or others (mode 0775)"},
		{"manifest directory chmod 1777", 0,
			[]pathStep{root("/", dir|0o755), listed(root("/m", sticky|0o777)), file},
			"the manifest directory /m is writable by group or others (mode 1777; the sticky bit does not stop new files)"},
		{"manifest directory another user owns, mode 0755", 0,
			[]pathStep{root("/", dir|0o755), listed(owned(1000, root("/m", dir|0o755))), file},
			"the manifest directory /m is owned by uid 1000"},
		{"a sticky root-owned parent (/tmp)", 0,
			[]pathStep{root("/", dir|0o755), root("/tmp", sticky|0o777), listed(root("/tmp/m", dir|0o700)), root("/tmp/m/web.yaml", 0o600)}, ""},
		{"a world-writable parent without the sticky bit", 0,
			[]pathStep{root("/", dir|0o755), root("/srv", dir|0o777), listed(root("/srv/m", dir|0o755)), file},
			"directory /srv is writable by group or others (mode 0777)"},
		{"a sticky parent another user owns", 0,
			[]pathStep{root("/", dir|0o755), owned(1000, root("/scratch", sticky|0o777)), listed(root("/scratch/m", dir|0o755)), file},
			"directory /scratch is owned by uid 1000"},
		{"root's link to root's file elsewhere", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/opt", dir|0o755), root("/opt/web.yaml", 0o644)), ""},
		{"a link to a file another user owns", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/home", dir|0o755), owned(1000, root("/home/u", dir|0o700)), owned(1000, root("/home/u/web.yaml", 0o644))),
			"directory /home/u is owned by uid 1000"},
		{"a link to another user's file in root's directory", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/opt", dir|0o755), owned(1000, root("/opt/web.yaml", 0o644))),
			"file /opt/web.yaml is owned by uid 1000"},
		{"a link through a group-writable directory", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/opt", dir|0o775), root("/opt/web.yaml", 0o644)),
			"directory /opt is writable by group or others (mode 0775)"},
		{"a link another user owns", 0,
			path(owned(1000, root("/etc/m/web.yaml", link|0o777)), root("/opt", dir|0o755), root("/opt/web.yaml", 0o644)),
			"link /etc/m/web.yaml is owned by uid 1000"},
		{"a link's chain: the second link another user's", 0,
			path(root("/etc/m/web.yaml", link|0o777), owned(1000, root("/etc/m/web2.yaml", link|0o777)), root("/opt", dir|0o755), root("/opt/web.yaml", 0o644)),
			"link /etc/m/web2.yaml is owned by uid 1000"},
		{"a root-owned file in /tmp, linked", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/tmp", sticky|0o777), root("/tmp/web.yaml", 0o644)), ""},
		{"another user's file in /tmp, linked", 0,
			path(root("/etc/m/web.yaml", link|0o777), root("/tmp", sticky|0o777), owned(65534, root("/tmp/web.yaml", 0o644))),
			"file /tmp/web.yaml is owned by uid 65534"},
		{"the first untrusted step is named", 0,
			[]pathStep{root("/", dir|0o777), listed(root("/m", sticky|0o777)), owned(5, file)},
			"directory / is writable by group or others (mode 0777)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := judgeTrust(tc.steps, tc.euid)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("trusted, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			case err != nil && !strings.HasSuffix(err.Error(), "whoever can write there can run pods as root"):
				t.Fatalf("error %q does not say why it matters", err)
			}
		})
	}
}
