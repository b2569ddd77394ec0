package swupdate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/firmware"
	"github.com/podvisor/podvisor/test/prereq"
)

// device is Debian's SWUpdate running on temporary files: its sockets in
// a temporary TMPDIR, the GRUB environment block it keeps ustate in (at
// /boot/grub/grubenv, compiled in) bind-mounted from the temp dir in a
// mount namespace of its own, and a raw handler writing to a slot file.
type device struct {
	t        *testing.T
	dir      string
	swupdate *exec.Cmd
	driver   *Driver
	boots    int
	ca       string
	cert     string
	key      string
	testCtx  context.Context
}

func newDevice(t *testing.T) *device {
	t.Helper()
	prereq.Root(t, "SWUpdate's bootloader environment is bind-mounted in a mount namespace")
	for _, cmd := range []string{"swupdate", "unshare", "cpio", "openssl"} {
		if _, err := exec.LookPath(cmd); err != nil {
			prereq.Missing(t, "%s (Debian's swupdate, util-linux, cpio, openssl): %v", cmd, err)
		}
	}
	if fi, err := os.Stat("/boot"); err != nil || !fi.IsDir() {
		prereq.Missing(t, "a /boot directory to mount SWUpdate's grubenv over: %v", err)
	}
	dir := t.TempDir()
	d := &device{t: t, dir: dir}
	for _, sub := range []string{"tmp", "boot/grub", "state", "pki"} {
		must(t, os.MkdirAll(filepath.Join(dir, sub), 0o700))
	}
	// An empty GRUB environment block, as grub-editenv creates it.
	head := "# GRUB Environment Block\n"
	must(t, os.WriteFile(filepath.Join(dir, "boot/grub/grubenv"), []byte(head+strings.Repeat("#", 1024-len(head))), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "slot"), make([]byte, 1<<20), 0o600))
	d.ca, d.cert, d.key = d.pki("ca")
	d.driver = New(filepath.Join(dir, "tmp", "sockinstctrl"), filepath.Join(dir, "tmp", "swupdateprog"), filepath.Join(dir, "state"))
	t.Cleanup(d.cleanup)
	d.reboot()
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (d *device) run(name string, args ...string) {
	d.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		d.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// pki makes a CA and a signing certificate it issued.
func (d *device) pki(prefix string) (ca, cert, key string) {
	p := func(name string) string { return filepath.Join(d.dir, "pki", prefix+"-"+name) }
	d.run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.pem"),
		"-subj", "/O=podvisor test/CN="+prefix+" CA", "-days", "2")
	d.run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("key.pem"), "-out", p("csr.pem"),
		"-subj", "/O=podvisor test/CN="+prefix+" signer")
	d.run("openssl", "x509", "-req", "-in", p("csr.pem"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
		"-out", p("cert.pem"), "-days", "2")
	return p("ca.pem"), p("cert.pem"), p("key.pem")
}

func stop(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		// SWUpdate forks helpers (the chunks downloader): the group goes.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
}

// reboot restarts SWUpdate in a new boot (a new boot ID); the grubenv
// file keeps ustate across it, as the bootloader's environment would.
func (d *device) reboot() {
	d.t.Helper()
	stop(d.swupdate)
	for _, s := range []string{"sockinstctrl", "swupdateprog"} {
		os.Remove(filepath.Join(d.dir, "tmp", s))
	}
	d.boots++
	idFile := filepath.Join(d.dir, fmt.Sprintf("boot_id.%d", d.boots))
	must(d.t, os.WriteFile(idFile, []byte(fmt.Sprintf("boot-%d\n", d.boots)), 0o600))
	d.driver.BootIDFile = idFile
	script := fmt.Sprintf("mount --bind %s /boot && exec swupdate -v -B grub -H podvisor-test:1.0 -k %s",
		filepath.Join(d.dir, "boot"), d.ca)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(d.dir, "tmp"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.OpenFile(filepath.Join(d.dir, "swupdate.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(d.t, err)
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	must(d.t, cmd.Start())
	d.swupdate = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := d.driver.Booted(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out after 15s waiting for SWUpdate's control socket: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testTimeout bounds each test's talk with SWUpdate: a hang fails the
// test in minutes and its cleanup still stops SWUpdate (go test's own
// -timeout panics and leaves it running).
const testTimeout = 2 * time.Minute

// ctx is the test's context, ending testTimeout after the device started.
func (d *device) ctx() context.Context {
	if d.testCtx == nil {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		d.t.Cleanup(cancel)
		d.testCtx = ctx
	}
	return d.testCtx
}

func (d *device) cleanup() {
	stop(d.swupdate)
	if d.t.Failed() {
		data, _ := os.ReadFile(filepath.Join(d.dir, "swupdate.log"))
		if len(data) > 8000 {
			data = data[len(data)-8000:]
		}
		d.t.Logf("swupdate.log (end):\n%s", data)
	}
}

// swu builds a .swu of image for the slot file, its sw-description signed
// with cert and key (CMS), and returns its path; sha256 "" is the image's.
func (d *device) swu(name string, image []byte, cert, key, sha string) string {
	d.t.Helper()
	in := filepath.Join(d.dir, name+".in")
	must(d.t, os.Mkdir(in, 0o700))
	if sha == "" {
		sum := sha256.Sum256(image)
		sha = hex.EncodeToString(sum[:])
	}
	desc := fmt.Sprintf(`software = {
	version = "2.0";
	hardware-compatibility: [ "1.0" ];
	images: ( {
		filename = "rootfs.img";
		device = "%s";
		type = "raw";
		sha256 = "%s";
	} );
}
`, filepath.Join(d.dir, "slot"), sha)
	must(d.t, os.WriteFile(filepath.Join(in, "sw-description"), []byte(desc), 0o600))
	must(d.t, os.WriteFile(filepath.Join(in, "rootfs.img"), image, 0o600))
	d.run("openssl", "cms", "-sign", "-in", filepath.Join(in, "sw-description"), "-out", filepath.Join(in, "sw-description.sig"),
		"-signer", cert, "-inkey", key, "-outform", "DER", "-nosmimecap", "-binary")
	out := filepath.Join(d.dir, name+".swu")
	// sw-description first, its signature next: SWUpdate reads the cpio
	// as a stream.
	cmd := exec.Command("sh", "-c", fmt.Sprintf("cd %s && printf 'sw-description\\nsw-description.sig\\nrootfs.img\\n' | cpio -o -H crc > %s", in, out))
	if o, err := cmd.CombinedOutput(); err != nil {
		d.t.Fatalf("cpio: %v\n%s", err, o)
	}
	return out
}

// ustate is the update state in the GRUB environment block.
func (d *device) ustate() string {
	data, err := os.ReadFile(filepath.Join(d.dir, "boot/grub/grubenv"))
	must(d.t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "ustate="); ok {
			return v
		}
	}
	return ""
}

func randomImage(t *testing.T) []byte {
	img := make([]byte, 300<<10)
	if _, err := rand.Read(img); err != nil {
		t.Fatal(err)
	}
	return img
}

func (d *device) install(swu string) {
	d.t.Helper()
	var seen []int
	if err := d.driver.Install(d.ctx(), swu, func(p firmware.Progress) { seen = append(seen, p.Percent) }); err != nil {
		d.t.Fatal(err)
	}
	// SWUpdate registers a progress connection in a thread of its own and
	// says nothing when it has: on a busy machine the steps before it are
	// never sent to the driver (TestSWUpdateMissedProgress), and the end
	// comes from GET_STATUS. So the steps seen may be the 100 alone.
	if len(seen) == 0 || seen[len(seen)-1] != 100 {
		d.t.Fatalf("progress %v: want steps ending at 100", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			d.t.Fatalf("progress %v does not increase", seen)
		}
	}
	d.t.Logf("progress %v", seen)
}

func ok(context.Context) error { return nil }

func TestSWUpdateInstallAndCommit(t *testing.T) {
	d := newDevice(t)
	ctx := d.ctx()
	img := randomImage(t)
	d.install(d.swu("v2", img, d.cert, d.key, ""))
	slot, err := os.ReadFile(filepath.Join(d.dir, "slot"))
	must(t, err)
	if !bytes.Equal(slot[:len(img)], img) {
		t.Fatal("the slot does not hold the .swu's image")
	}
	if s := d.ustate(); s != "1" {
		t.Fatalf("ustate %q after the install, want 1 (installed)", s)
	}
	st, err := d.driver.Booted(ctx)
	must(t, err)
	if !st.AwaitingReboot {
		t.Fatalf("before the reboot: %+v", st)
	}
	if res, err := firmware.Confirm(ctx, d.driver, ok, 10*time.Second, firmware.RealClock); err != nil || res.Verdict != firmware.Nothing {
		t.Fatalf("before the reboot: %+v %v", res, err)
	}
	if s := d.ustate(); s != "1" {
		t.Fatalf("ustate %q: reset before the reboot", s)
	}

	d.reboot()
	st, err = d.driver.Booted(ctx)
	must(t, err)
	if !st.Pending {
		t.Fatalf("after the reboot: %+v, want pending", st)
	}
	res, err := firmware.Confirm(ctx, d.driver, ok, 10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.Committed {
		t.Fatalf("%+v, want committed", res)
	}
	if s := d.ustate(); s != "0" {
		t.Errorf("ustate %q after the commit, want 0", s)
	}
}

func TestSWUpdateHealthGate(t *testing.T) {
	d := newDevice(t)
	ctx := d.ctx()
	d.install(d.swu("v2", randomImage(t), d.cert, d.key, ""))
	d.reboot()
	res, err := firmware.Confirm(ctx, d.driver, func(context.Context) error { return errors.New("hub not reached") },
		10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.Rejected || !strings.Contains(res.Reason, "hub not reached") {
		t.Fatalf("%+v, want rejected", res)
	}
	if s := d.ustate(); s != "3" {
		t.Fatalf("ustate %q after a failed health check, want 3 (failed)", s)
	}
	// The bootloader went back to the old system: podvisor reports it
	// and, once healthy, settles the state.
	d.reboot()
	res, err = firmware.Confirm(ctx, d.driver, ok, 10*time.Second, firmware.RealClock)
	must(t, err)
	if res.Verdict != firmware.FellBack {
		t.Fatalf("%+v, want fell-back", res)
	}
	if s := d.ustate(); s != "0" {
		t.Errorf("ustate %q after the fallback was settled, want 0", s)
	}
}

func TestSWUpdateRefused(t *testing.T) {
	d := newDevice(t)
	img := randomImage(t)
	_, otherCert, otherKey := d.pki("other")
	for _, tc := range []struct{ name, swu, want string }{
		{"signed by another CA", d.swu("untrusted", img, otherCert, otherKey, ""), "ignature"},
		{"wrong hash", d.swu("badhash", img, d.cert, d.key, strings.Repeat("ab", 32)), "failed"},
		{"not a .swu", d.notSWU(), "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.driver.Install(d.ctx(), tc.swu, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("install: %v, want an error with %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	// SWUpdate is still there for the next one.
	d.install(d.swu("good", img, d.cert, d.key, ""))
}

func (d *device) notSWU() string {
	p := filepath.Join(d.dir, "garbage.swu")
	must(d.t, os.WriteFile(p, bytes.Repeat([]byte("not a cpio archive\n"), 1000), 0o600))
	return p
}
