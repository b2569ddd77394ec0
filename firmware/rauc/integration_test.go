package rauc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/firmware"
	"github.com/podvisor/podvisor/test/prereq"
)

// device is a RAUC system in a temporary directory: two slot image files
// (rootfs.0 boots as A, rootfs.1 as B), a custom bootloader backend that
// keeps the boot order and each slot's state in files (as GRUB's ORDER and
// X_OK do), a private system bus and the RAUC service on it.
type device struct {
	t             *testing.T
	dir, bus      string
	busd, service *exec.Cmd
	driver        *Driver
	cert, key, ca string
	bootIDs       int
}

const backendScript = `#!/bin/sh
# RAUC custom bootloader backend: the boot order and each slot's state in
# files; the primary is the first good slot of the order.
d=$(dirname "$0")/boot
case "$1" in
get-primary)
	for s in $(cat "$d/order"); do
		[ "$(cat "$d/state.$s" 2>/dev/null || echo good)" = good ] && { echo "$s"; exit 0; }
	done
	exit 1;;
set-primary)
	n="$2"; for s in $(cat "$d/order"); do [ "$s" = "$2" ] || n="$n $s"; done
	echo "$n" > "$d/order"; echo good > "$d/state.$2";;
get-state) cat "$d/state.$2" 2>/dev/null || echo good;;
set-state) echo "$3" > "$d/state.$2";;
*) echo "unknown command $1" >&2; exit 1;;
esac
`

func newDevice(t *testing.T) *device {
	t.Helper()
	prereq.Root(t, "RAUC loop-mounts bundles")
	for _, cmd := range []string{"rauc", "dbus-daemon", "openssl", "mksquashfs"} {
		if _, err := exec.LookPath(cmd); err != nil {
			prereq.Missing(t, "%s (Debian's rauc, dbus-daemon, openssl, squashfs-tools): %v", cmd, err)
		}
	}
	dir := t.TempDir()
	d := &device{t: t, dir: dir, bus: "unix:path=" + filepath.Join(dir, "bus.sock")}
	for _, sub := range []string{"boot", "mnt", "data", "state", "pki"} {
		must(t, os.Mkdir(filepath.Join(dir, sub), 0o700))
	}
	must(t, os.WriteFile(filepath.Join(dir, "backend.sh"), []byte(backendScript), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "boot", "order"), []byte("A B\n"), 0o600))
	for _, slot := range []string{"rootfs.0", "rootfs.1"} {
		must(t, os.WriteFile(filepath.Join(dir, slot), make([]byte, 1<<20), 0o600))
	}
	// A throwaway CA (the keyring) and a signing certificate it issued.
	d.ca, d.cert, d.key = d.pki("ca", "")
	conf := fmt.Sprintf(`[system]
compatible=podvisor-test
bootloader=custom
mountprefix=%[1]s/mnt
data-directory=%[1]s/data
[handlers]
bootloader-custom-backend=%[1]s/backend.sh
[keyring]
path=%[2]s
[slot.rootfs.0]
device=%[1]s/rootfs.0
type=raw
bootname=A
[slot.rootfs.1]
device=%[1]s/rootfs.1
type=raw
bootname=B
`, dir, d.ca)
	must(t, os.WriteFile(filepath.Join(dir, "system.conf"), []byte(conf), 0o600))
	busConf := fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`, d.bus)
	must(t, os.WriteFile(filepath.Join(dir, "bus.conf"), []byte(busConf), 0o600))
	d.busd = d.start("dbus-daemon", "--config-file="+filepath.Join(dir, "bus.conf"), "--nofork", "--nopidfile")
	waitFor(t, "dbus-daemon's socket "+filepath.Join(dir, "bus.sock"), func() bool {
		_, err := os.Stat(filepath.Join(dir, "bus.sock"))
		return err == nil
	})
	d.driver = New(d.bus, filepath.Join(dir, "state"))
	d.reboot("A")
	t.Cleanup(d.cleanup)
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pki makes a CA and a signing certificate issued by it, named prefix.
func (d *device) pki(prefix, _ string) (ca, cert, key string) {
	p := func(name string) string { return filepath.Join(d.dir, "pki", prefix+"-"+name) }
	d.run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.pem"),
		"-subj", "/O=podvisor test/CN="+prefix+" CA", "-days", "2")
	d.run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("key.pem"), "-out", p("csr.pem"),
		"-subj", "/O=podvisor test/CN="+prefix+" signer")
	d.run("openssl", "x509", "-req", "-in", p("csr.pem"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
		"-out", p("cert.pem"), "-days", "2")
	return p("ca.pem"), p("cert.pem"), p("key.pem")
}

func (d *device) run(name string, args ...string) string {
	d.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (d *device) start(name string, args ...string) *exec.Cmd {
	d.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+d.bus)
	log, err := os.Create(filepath.Join(d.dir, name+".log"))
	must(d.t, err)
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	must(d.t, cmd.Start())
	return cmd
}

func stop(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// reboot restarts the RAUC service as if the device had booted slot
// bootname, in a new boot (a new boot ID).
func (d *device) reboot(bootname string) {
	d.t.Helper()
	stop(d.service)
	d.bootIDs++
	idFile := filepath.Join(d.dir, fmt.Sprintf("boot_id.%d", d.bootIDs))
	must(d.t, os.WriteFile(idFile, []byte(fmt.Sprintf("boot-%d\n", d.bootIDs)), 0o600))
	d.driver.BootIDFile = idFile
	d.service = d.start("rauc", "service", "--conf="+filepath.Join(d.dir, "system.conf"),
		"--mount="+filepath.Join(d.dir, "mnt"), "--override-boot-slot="+bootname)
	waitFor(d.t, "the RAUC service on the test bus", func() bool {
		_, err := d.driver.Booted(context.Background())
		return err == nil
	})
}

func (d *device) cleanup() {
	stop(d.service)
	stop(d.busd)
	// RAUC unmounts and detaches its bundle after each install; whatever
	// a failed run left under the temp dir goes here.
	if out, err := exec.Command("findmnt", "-rn", "-o", "TARGET").Output(); err == nil {
		for _, m := range strings.Fields(string(out)) {
			if strings.HasPrefix(m, d.dir) {
				exec.Command("umount", "-l", m).Run()
			}
		}
	}
	if out, err := exec.Command("losetup", "-nO", "NAME,BACK-FILE").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], d.dir) {
				d.t.Errorf("loop device %s left on %s", f[0], f[1])
				exec.Command("losetup", "-d", f[0]).Run()
			}
		}
	}
	if d.t.Failed() {
		for _, log := range []string{"rauc.log", "dbus-daemon.log"} {
			data, _ := os.ReadFile(filepath.Join(d.dir, log))
			d.t.Logf("%s:\n%s", log, data)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 15s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bundle builds a bundle of image, signed with cert and key, and returns
// its path.
func (d *device) bundle(name string, image []byte, cert, key string) string {
	d.t.Helper()
	in := filepath.Join(d.dir, name+".in")
	must(d.t, os.Mkdir(in, 0o700))
	must(d.t, os.WriteFile(filepath.Join(in, "rootfs.img"), image, 0o600))
	// plain, not verity: verity bundles need device-mapper
	// (/dev/mapper/control), which a container may not have.
	manifest := "[update]\ncompatible=podvisor-test\nversion=2.0\n[bundle]\nformat=plain\n[image.rootfs]\nfilename=rootfs.img\n"
	must(d.t, os.WriteFile(filepath.Join(in, "manifest.raucm"), []byte(manifest), 0o600))
	out := filepath.Join(d.dir, name+".raucb")
	d.run("rauc", "bundle", "--cert="+cert, "--key="+key, in, out)
	return out
}

func (d *device) bootFile(name string) string {
	data, err := os.ReadFile(filepath.Join(d.dir, "boot", name))
	if err != nil {
		return "good" // the backend's default
	}
	return strings.TrimSpace(string(data))
}

// status is rauc status --output-format=json's booted slot and primary.
func (d *device) status() (booted, primary string, bootStatus map[string]string) {
	d.t.Helper()
	cmd := exec.Command("rauc", "status", "--conf="+filepath.Join(d.dir, "system.conf"), "--output-format=json")
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+d.bus)
	out, err := cmd.Output()
	if err != nil {
		d.t.Fatalf("rauc status: %v", err)
	}
	var s struct {
		Booted  string                      `json:"booted"`
		Primary string                      `json:"boot_primary"`
		Slots   []map[string]map[string]any `json:"slots"`
	}
	if err := json.Unmarshal(out, &s); err != nil {
		d.t.Fatalf("rauc status: %v\n%s", err, out)
	}
	bootStatus = map[string]string{}
	for _, m := range s.Slots {
		for name, f := range m {
			bootStatus[name], _ = f["boot_status"].(string)
		}
	}
	return s.Booted, s.Primary, bootStatus
}

func randomImage(t *testing.T) []byte {
	img := make([]byte, 300<<10)
	if _, err := rand.Read(img); err != nil {
		t.Fatal(err)
	}
	return img
}

// install installs bundle through the driver and checks its progress.
func (d *device) install(bundle string) {
	d.t.Helper()
	var seen []int
	err := d.driver.Install(context.Background(), bundle, func(p firmware.Progress) { seen = append(seen, p.Percent) })
	if err != nil {
		d.t.Fatal(err)
	}
	if len(seen) < 3 || seen[len(seen)-1] != 100 {
		d.t.Fatalf("progress %v: want several steps ending at 100", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			d.t.Fatalf("progress %v does not increase", seen)
		}
	}
	d.t.Logf("progress %v", seen)
}

// Install through the driver, boot the new slot, pass the health check:
// the slot is marked good.
func TestRAUCInstallAndCommit(t *testing.T) {
	d := newDevice(t)
	img := randomImage(t)
	d.install(d.bundle("v2", img, d.cert, d.key))
	slot, err := os.ReadFile(filepath.Join(d.dir, "rootfs.1"))
	must(t, err)
	if !bytes.Equal(slot[:len(img)], img) {
		t.Fatal("rootfs.1 does not hold the bundle's image")
	}
	if _, primary, _ := d.status(); primary != "rootfs.1" {
		t.Fatalf("primary %s after the install, want rootfs.1", primary)
	}
	ctx := context.Background()
	st, err := d.driver.Booted(ctx)
	must(t, err)
	if !st.AwaitingReboot || st.Pending {
		t.Fatalf("before the reboot: %+v, want awaiting the reboot", st)
	}
	// Restarting podvisor before the reboot confirms nothing.
	res, err := firmware.Confirm(ctx, d.driver, func(context.Context) error { return nil }, 10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.Nothing {
		t.Fatalf("before the reboot: %+v", res)
	}

	d.reboot("B")
	st, err = d.driver.Booted(ctx)
	must(t, err)
	if !st.Pending || st.Slot != "rootfs.1" || st.Version != "2.0" {
		t.Fatalf("after the reboot: %+v, want rootfs.1 2.0 pending", st)
	}
	d.run("sh", "-c", "echo bad > "+filepath.Join(d.dir, "boot", "state.B")) // as a bootloader's attempt counter would
	res, err = firmware.Confirm(ctx, d.driver, func(context.Context) error { return nil }, 10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.Committed {
		t.Fatalf("%+v, want committed", res)
	}
	if s := d.bootFile("state.B"); s != "good" {
		t.Errorf("slot B is %s after the commit, want good", s)
	}
	if booted, primary, bs := d.status(); booted != "B" || primary != "rootfs.1" || bs["rootfs.1"] != "good" {
		t.Errorf("rauc status: booted %s, primary %s, boot status %v", booted, primary, bs)
	}
	if st, _ := d.driver.Booted(ctx); st.Pending || st.FellBack {
		t.Errorf("still pending after the commit: %+v", st)
	}
}

// A new slot that fails podvisor's health check is marked bad and the
// bootloader goes back to the old one; a new slot that never came up is
// reported as a fallback.
func TestRAUCHealthGate(t *testing.T) {
	d := newDevice(t)
	ctx := context.Background()
	d.install(d.bundle("v2", randomImage(t), d.cert, d.key))
	d.reboot("B")
	res, err := firmware.Confirm(ctx, d.driver, func(context.Context) error { return errors.New("pod web not adopted") },
		10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.Rejected || !strings.Contains(res.Reason, "pod web not adopted") {
		t.Fatalf("%+v, want rejected", res)
	}
	if s := d.bootFile("state.B"); s != "bad" {
		t.Errorf("slot B is %q after a failed health check, want bad", s)
	}
	if _, primary, _ := d.status(); primary != "rootfs.0" {
		t.Errorf("primary %s after the rejection, want rootfs.0 (the fallback)", primary)
	}

	// Install again (rootfs.1 is still the inactive slot from A); the new
	// system never comes up: the bootloader boots A.
	d.reboot("A")
	d.install(d.bundle("v3", randomImage(t), d.cert, d.key))
	d.reboot("A")
	res, err = firmware.Confirm(ctx, d.driver, func(context.Context) error { return nil }, 10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.FellBack || res.State.Slot != "rootfs.0" {
		t.Fatalf("%+v, want a fallback to rootfs.0", res)
	}
	if st, _ := d.driver.Booted(ctx); st.FellBack {
		t.Errorf("the fallback is reported again after it was settled: %+v", st)
	}
}

// Bundles RAUC refuses fail the install with RAUC's own reason, and the
// slots are untouched.
func TestRAUCRefusedBundles(t *testing.T) {
	d := newDevice(t)
	img := randomImage(t)
	_, otherCert, otherKey := d.pki("other", "")
	good := d.bundle("good", img, d.cert, d.key)
	corrupt := filepath.Join(d.dir, "corrupt.raucb")
	data, err := os.ReadFile(good)
	must(t, err)
	data[len(data)/3] ^= 0xff
	must(t, os.WriteFile(corrupt, data, 0o600))
	for _, tc := range []struct{ name, bundle, want string }{
		{"signed by another CA", d.bundle("untrusted", img, otherCert, otherKey), "signature"},
		{"corrupted", corrupt, "failed"},
		{"missing", filepath.Join(d.dir, "none.raucb"), "none.raucb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.driver.Install(context.Background(), tc.bundle, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("install: %v, want an error with %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	slot, err := os.ReadFile(filepath.Join(d.dir, "rootfs.1"))
	must(t, err)
	if !bytes.Equal(slot, make([]byte, 1<<20)) {
		t.Error("a refused bundle wrote to rootfs.1")
	}
	if _, primary, _ := d.status(); primary != "rootfs.0" {
		t.Errorf("primary %s after refused installs, want rootfs.0", primary)
	}
}
