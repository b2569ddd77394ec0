package packages

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// initSystem is a device's service manager as the maintainer scripts find
// it: the commands on PATH and the directories that betray it.
type initSystem int

const (
	systemd initSystem = iota
	openrc
	sysvinit
)

// scriptRun is one maintainer script call on a fake device.
type scriptRun struct {
	root, log string
}

// newDevice makes a root directory for init, fake service commands that
// record their calls, a fake init script, and a listening daemon socket.
func newDevice(t *testing.T, init initSystem) *scriptRun {
	t.Helper()
	dir := t.TempDir()
	d := &scriptRun{root: filepath.Join(dir, "root"), log: filepath.Join(dir, "calls")}
	bin := filepath.Join(dir, "bin")
	fakes := []string{"podvisor"}
	switch init {
	case systemd:
		fakes = append(fakes, "systemctl")
		mkdir(t, filepath.Join(d.root, "run/systemd/system"))
	case openrc:
		fakes = append(fakes, "rc-update", "rc-service")
		mkdir(t, filepath.Join(d.root, "etc/runlevels"))
	case sysvinit:
		fakes = append(fakes, "update-rc.d")
	}
	mkdir(t, bin)
	for _, name := range fakes {
		writeScript(t, filepath.Join(bin, name), "#!/bin/sh\necho \""+name+" $*\" >> "+d.log+"\n")
	}
	mkdir(t, filepath.Join(d.root, "etc/init.d"))
	writeScript(t, filepath.Join(d.root, "etc/init.d/podvisor"), "#!/bin/sh\necho \"init.d $*\" >> "+d.log+"\n")
	mkdir(t, filepath.Join(d.root, "var/lib/podvisor/pods"))
	mkdir(t, filepath.Join(d.root, "run/podvisor"))
	l, err := net.Listen("unix", filepath.Join(d.root, "run/podvisor/podvisor.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	return d
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeScript(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs a maintainer script and returns the service calls it made.
func (d *scriptRun) run(t *testing.T, script string, args ...string) []string {
	t.Helper()
	os.Remove(d.log)
	cmd := exec.Command("sh", append([]string{filepath.Join(repo, "packaging/nfpm/scripts", script)}, args...)...)
	cmd.Env = append(os.Environ(), "PODVISOR_PKG_ROOT="+d.root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", script, args, err, out)
	}
	data, err := os.ReadFile(d.log)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// Each maintainer script, as dpkg/opkg, rpm and apk call it, under each
// init system: a first install enables and starts the service, an upgrade
// at most restarts the daemon (never drains or stops the service: the
// pods keep running and the new daemon adopts them), a removal drains
// the pods and stops the service, and only a purge deletes the data dir.
func TestMaintainerScripts(t *testing.T) {
	sd := []string{"systemctl daemon-reload"}
	cases := []struct {
		name   string
		init   initSystem
		script string
		args   []string
		want   []string
	}{
		{"deb install", systemd, "postinstall.sh", []string{"configure", ""}, append(sd, "systemctl enable podvisor.service", "systemctl start podvisor.service")},
		{"deb upgrade", systemd, "postinstall.sh", []string{"configure", "1.0.0"}, append(sd, "systemctl try-restart podvisor.service")},
		{"rpm install", systemd, "postinstall.sh", []string{"1"}, append(sd, "systemctl enable podvisor.service", "systemctl start podvisor.service")},
		{"rpm upgrade", systemd, "postinstall.sh", []string{"2"}, append(sd, "systemctl try-restart podvisor.service")},
		{"deb prerm upgrade", systemd, "preremove.sh", []string{"upgrade", "1.0.1"}, nil},
		{"rpm prerm upgrade", systemd, "preremove.sh", []string{"1"}, nil},
		{"deb prerm remove", systemd, "preremove.sh", []string{"remove"}, []string{"podvisor drain", "systemctl disable --now podvisor.service"}},
		{"rpm prerm remove", systemd, "preremove.sh", []string{"0"}, []string{"podvisor drain", "systemctl disable --now podvisor.service"}},
		{"deb postrm upgrade", systemd, "postremove.sh", []string{"upgrade", "1.0.1"}, nil},
		{"deb postrm remove", systemd, "postremove.sh", []string{"remove"}, sd},
		{"apk install", openrc, "postinstall.sh", []string{"1.0.0-r0"}, []string{"rc-update add podvisor default", "rc-service podvisor start"}},
		{"apk upgrade", openrc, "postupgrade-apk.sh", []string{"1.0.1-r0", "1.0.0-r0"}, []string{"rc-service --ifstarted podvisor restart"}},
		{"apk deinstall", openrc, "preremove.sh", []string{"1.0.0-r0"}, []string{"podvisor drain", "rc-service podvisor stop", "rc-update del podvisor default"}},
		{"sysv install", sysvinit, "postinstall.sh", []string{"configure", ""}, []string{"update-rc.d podvisor defaults", "init.d start"}},
		{"sysv upgrade", sysvinit, "postinstall.sh", []string{"configure", "1.0.0"}, []string{"init.d status", "init.d restart"}},
		{"ipk prerm upgrade", sysvinit, "preremove.sh", []string{"upgrade"}, nil},
		{"ipk prerm remove", sysvinit, "preremove.sh", []string{"remove"}, []string{"podvisor drain", "init.d stop"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDevice(t, c.init)
			if got := d.run(t, c.script, c.args...); !slices.Equal(got, c.want) {
				t.Errorf("calls %q, want %q", got, c.want)
			}
			if _, err := os.Stat(filepath.Join(d.root, "var/lib/podvisor/pods")); err != nil {
				t.Errorf("the data dir is gone after %s %q: %v", c.script, c.args, err)
			}
		})
	}
}

// Only dpkg's purge deletes the data dir; a removal keeps it for a
// reinstall, and an offline install into an image (DPKG_ROOT) touches
// nothing.
func TestPurgeRemovesDataDir(t *testing.T) {
	d := newDevice(t, systemd)
	t.Setenv("DPKG_ROOT", "/image")
	if got := d.run(t, "postremove.sh", "purge"); got != nil {
		t.Errorf("offline purge made calls %q", got)
	}
	if _, err := os.Stat(filepath.Join(d.root, "var/lib/podvisor")); err != nil {
		t.Fatalf("an offline purge removed the device's data dir: %v", err)
	}
	t.Setenv("DPKG_ROOT", "")
	d.run(t, "postremove.sh", "purge")
	if _, err := os.Stat(filepath.Join(d.root, "var/lib/podvisor")); !os.IsNotExist(err) {
		t.Errorf("purge left the data dir: %v", err)
	}
}
