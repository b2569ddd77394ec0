// Package packages checks what podvisor ships to device images without
// building them: the packaged default config, the nfpm package
// definitions and their maintainer scripts (run against fake service
// managers), the Yocto layer and the Buildroot tree.
package packages

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/config"
)

// repo is the repository's root, relative to this package.
const repo = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The packaged /etc/podvisor/config.yaml loads and validates as
// `podvisor run --config` does, keeps the safe defaults and does not ask
// for containerd (podvisor-containerd is a separate package).
func TestPackagedConfigLoads(t *testing.T) {
	c, err := config.Load(filepath.Join(repo, "packaging", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("packaged config is invalid: %v", err)
	}
	if c.DataDir != config.DefaultDataDir || c.Manifests != config.DefaultManifests || c.Socket != config.DefaultSocket {
		t.Errorf("paths: dataDir %q manifests %q socket %q; want the defaults the packages create", c.DataDir, c.Manifests, c.Socket)
	}
	if c.ContainerdNamed() {
		t.Error("the packaged config asks for containerd: devices without it would fail to start")
	}
	if c.Hub.URL != "" || c.Hub.AllowUnsigned || c.Hub.AllowProcessPods || c.Hub.AllowRootProcessPods {
		t.Errorf("the packaged config opens the device to a hub: %+v", c.Hub)
	}
	// Every key it sets is the default: the file documents, it does not
	// change behaviour.
	if def := config.Default(); c.Cgroups != def.Cgroups || c.Logs.MaxFiles != def.Logs.MaxFiles ||
		c.Logs.MaxSize.Cmp(def.Logs.MaxSize) != 0 {
		t.Errorf("cgroups %+v logs %+v differ from the defaults %+v %+v", c.Cgroups, c.Logs, def.Cgroups, def.Logs)
	}
}

// nfpmConfig is the part of an nfpm YAML these tests read.
type nfpmConfig struct {
	Name     string   `json:"name"`
	Arch     string   `json:"arch"`
	Version  string   `json:"version"`
	License  string   `json:"license"`
	Depends  []string `json:"depends"`
	Contents []struct {
		Src      string `json:"src"`
		Dst      string `json:"dst"`
		Type     string `json:"type"`
		Packager string `json:"packager"`
		FileInfo struct {
			Mode int `json:"mode"`
		} `json:"file_info"`
	} `json:"contents"`
	Scripts map[string]string `json:"scripts"`
	APK     struct {
		Scripts map[string]string `json:"scripts"`
	} `json:"apk"`
}

func loadNfpm(t *testing.T, name string) nfpmConfig {
	t.Helper()
	var c nfpmConfig
	if err := yaml.Unmarshal([]byte(read(t, "packaging/nfpm/"+name+".yaml")), &c); err != nil {
		t.Fatalf("%s.yaml: %v", name, err)
	}
	if c.Name != name || c.Arch != "${ARCH}" || c.Version != "${VERSION}" {
		t.Errorf("%s.yaml: name %q arch %q version %q; want %s, ${ARCH}, ${VERSION}", name, c.Name, c.Arch, c.Version, name)
	}
	for _, e := range c.Contents {
		if e.Src == "" {
			continue
		}
		// packages.sh links bin/ to dist/VERSION/linux-ARCH/.
		if bin, ok := strings.CutPrefix(e.Src, "bin/"); ok {
			if _, err := os.Stat(filepath.Join(repo, "cmd", bin)); err != nil {
				t.Errorf("%s.yaml: %s is no binary of cmd/", name, e.Src)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(repo, e.Src)); err != nil {
			t.Errorf("%s.yaml: %v", name, err)
		}
	}
	return c
}

// The package definitions hold what the issue lists, in the right
// package, with the config file kept across upgrades.
func TestNfpmPackages(t *testing.T) {
	pv := loadNfpm(t, "podvisor")
	dsts := map[string][]string{} // dst → types
	for _, e := range pv.Contents {
		dsts[e.Dst] = append(dsts[e.Dst], e.Type)
		if e.Dst == "/var/lib/podvisor" && e.FileInfo.Mode != 0o700 {
			t.Errorf("/var/lib/podvisor has mode %o, want 0700", e.FileInfo.Mode)
		}
	}
	for _, want := range []string{"/usr/bin/podvisor", "/usr/bin/podvisor-shim", "/usr/lib/systemd/system/podvisor.service",
		"/etc/init.d/podvisor", "/etc/podvisor/config.yaml", "/etc/podvisor/manifests", "/var/lib/podvisor"} {
		if _, ok := dsts[want]; !ok {
			t.Errorf("podvisor package lacks %s", want)
		}
	}
	if _, ok := dsts["/usr/bin/podvisor-containerd"]; ok {
		t.Error("podvisor-containerd is in the podvisor package; it has its own")
	}
	if got := dsts["/etc/podvisor/config.yaml"]; !slices.Equal(got, []string{"config|noreplace"}) {
		t.Errorf("/etc/podvisor/config.yaml types %q, want config|noreplace", got)
	}
	// One init script per packager: OpenRC's for apk, sysvinit's for the
	// others.
	packagers := map[string]string{}
	for _, e := range pv.Contents {
		if e.Dst == "/etc/init.d/podvisor" {
			packagers[e.Packager] = e.Src
		}
	}
	want := map[string]string{"deb": "packaging/sysvinit/podvisor", "rpm": "packaging/sysvinit/podvisor",
		"ipk": "packaging/sysvinit/podvisor", "apk": "packaging/openrc/podvisor"}
	for p, src := range want {
		if packagers[p] != src {
			t.Errorf("/etc/init.d/podvisor for %s is %q, want %q", p, packagers[p], src)
		}
	}
	for _, s := range []string{pv.Scripts["postinstall"], pv.Scripts["preremove"], pv.Scripts["postremove"], pv.APK.Scripts["postupgrade"]} {
		st, err := os.Stat(filepath.Join(repo, s))
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("maintainer script %q: missing or not executable (%v)", s, err)
		}
	}

	// The other two hold their binary and their licence files only.
	ctr := loadNfpm(t, "podvisor-containerd")
	if !slices.Contains(ctr.Depends, "podvisor") || !slices.Equal(binaries(ctr), []string{"/usr/bin/podvisor-containerd"}) {
		t.Errorf("podvisor-containerd: depends %q contents %+v; want podvisor and /usr/bin/podvisor-containerd only", ctr.Depends, ctr.Contents)
	}
	hub := loadNfpm(t, "podhub")
	if !slices.Equal(binaries(hub), []string{"/usr/bin/podhub"}) {
		t.Errorf("podhub: contents %+v; want /usr/bin/podhub only", hub.Contents)
	}
}

// binaries are a package's files outside its licence and documentation.
func binaries(c nfpmConfig) []string {
	var dsts []string
	for _, e := range c.Contents {
		if !strings.HasPrefix(e.Dst, "/usr/share/doc/") && !strings.HasPrefix(e.Dst, "/usr/share/licenses/") {
			dsts = append(dsts, e.Dst)
		}
	}
	return dsts
}

// The systemd unit lets the daemon restart or be upgraded without its
// pods: systemd signals the main process only and leaves the shims.
func TestUnitSparesPods(t *testing.T) {
	unit := read(t, "packaging/systemd/podvisor.service")
	for _, line := range []string{"KillMode=process", "Delegate=yes", "ExecStart=/usr/bin/podvisor run --config /etc/podvisor/config.yaml"} {
		if !strings.Contains(unit, "\n"+line+"\n") {
			t.Errorf("podvisor.service lacks %q", line)
		}
	}
	if strings.Contains(unit, "stop-pods-on-exit") {
		t.Error("podvisor.service stops the pods whenever the daemon exits")
	}
}

// The unit waits for the daemon's READY and watches its loop: the daemon
// notifies (Type=notify), only its main process may (the shims and the
// keeper share its cgroup), and a watchdog and a start-up bound are set.
func TestUnitNotifies(t *testing.T) {
	unit := read(t, "packaging/systemd/podvisor.service")
	for _, line := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=30", "TimeoutStartSec=300"} {
		if !strings.Contains(unit, "\n"+line+"\n") {
			t.Errorf("podvisor.service lacks %q", line)
		}
	}
}

// Every shell script the packages install or run parses (sh -n): the
// OpenRC script runs nowhere in these tests but on Alpine-like devices.
func TestShellScriptsParse(t *testing.T) {
	scripts, _ := filepath.Glob(filepath.Join(repo, "packaging/nfpm/scripts/*.sh"))
	scripts = append(scripts, filepath.Join(repo, "packaging/openrc/podvisor"), filepath.Join(repo, "packaging/sysvinit/podvisor"),
		filepath.Join(repo, "packaging/packages.sh"))
	for _, s := range scripts {
		if out, err := exec.Command("sh", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", s, err, out)
		}
	}
}
