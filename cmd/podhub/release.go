package main

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/hub/updates"
	"github.com/podvisor/podvisor/sync/protocol"
)

// fileList is a repeatable --file flag.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(s string) error { *f = append(*f, s); return nil }

// release is podhub release push: podvisor's own binaries as a release.
func (c *cli) release(args []string) error {
	if len(args) == 0 || args[0] != "push" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return helpFor(flag.NewFlagSet("release push", flag.ContinueOnError))
		}
		return errors.New("usage: podhub release push --version V --file PATH [--file PATH...] [--key FILE]")
	}
	fs := flag.NewFlagSet("release push", flag.ContinueOnError)
	version := fs.String("version", "", "the release's semantic version (v1.2.3)")
	var files fileList
	fs.Var(&files, "file", "a podvisor, podvisor-shim or podvisor-containerd binary of any architecture (repeat for each)")
	key := fs.String("key", "", "a separate ed25519 release key (PEM PRIVATE KEY) to sign with instead of the hub's; devices name its public half in their config")
	if pos, err := flags(fs, args[1:]); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("release push: unexpected argument %q", pos[0])
	}
	if *version == "" || len(files) == 0 {
		return errors.New("release push: --version and at least one --file are required")
	}
	rel := protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: *version, Created: time.Now().UTC()}
	paths := map[string]string{} // transfer sha -> file
	from := map[string]string{}  // arch/name -> file
	for _, f := range files {
		name, arch, err := releases.Inspect(f)
		if err != nil {
			return err
		}
		if other, dup := from[arch+"/"+name]; dup {
			return fmt.Errorf("%s and %s are both %s for %s", other, f, name, arch)
		}
		from[arch+"/"+name] = f
		a, err := releases.Describe(f, name, arch)
		if err != nil {
			return err
		}
		rel.Artifacts = append(rel.Artifacts, a)
		sha, _ := a.Transfer()
		paths[sha] = f
	}
	return c.pushRelease(rel, paths, *key)
}

// pushRelease signs the manifest (the hub's key, or keyFile) and streams
// it with the artifacts' bytes to podhub serve.
func (c *cli) pushRelease(rel protocol.Release, paths map[string]string, keyFile string) error {
	keyPath := c.path("hub.key")
	if keyFile != "" {
		keyPath = keyFile
	}
	data, err := os.ReadFile(keyPath)
	if err != nil {
		return fmt.Errorf("release key: %w", err)
	}
	priv, err := protocol.ParsePrivateKey(data)
	if err != nil {
		return fmt.Errorf("release key %s: %w", keyPath, err)
	}
	signed, err := protocol.SignRelease(rel, priv)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeUpload(mw, signed, keyFile != "", priv, rel, paths))
	}()
	var out api.ReleaseInfo
	err = c.client().Upload("/v1/releases", mw.FormDataContentType(), pr, &out)
	pr.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "release %s %s pushed (%s, signed with key %s)\n", out.Name, out.Version, out.Kind, out.KeyID)
	for _, a := range out.Artifacts {
		wire := ""
		if a.Encoding != "" {
			wire = fmt.Sprintf(", %s as %s", size(a.WireSize), a.Encoding)
		}
		fmt.Fprintf(c.out, "  %s\t%s\t%s%s\tsha256:%s\n", orNone(a.Arch), a.Name, size(a.Size), wire, a.SHA256)
	}
	return nil
}

// writeUpload writes the upload's parts: manifest, the release key's
// public half (a key other than the hub's), then each transfer's bytes
// once.
func writeUpload(mw *multipart.Writer, signed []byte, ownKey bool, priv ed25519.PrivateKey, rel protocol.Release, paths map[string]string) error {
	w, err := mw.CreateFormField(api.PartManifest)
	if err == nil {
		_, err = w.Write(signed)
	}
	if err == nil && ownKey {
		if w, err = mw.CreateFormField(api.PartKey); err == nil {
			_, err = w.Write(protocol.EncodePublicKey(priv.Public().(ed25519.PublicKey)))
		}
	}
	sent := map[string]bool{}
	for _, a := range rel.Artifacts {
		sha, _ := a.Transfer()
		if err != nil || sent[sha] {
			continue
		}
		sent[sha] = true
		if w, err = mw.CreateFormFile(api.PartBlob, sha); err != nil {
			break
		}
		var r io.ReadCloser
		if r, err = releases.Wire(paths[sha], a); err != nil {
			break
		}
		_, err = io.Copy(w, r)
		r.Close()
	}
	if err != nil {
		return err
	}
	return mw.Close()
}

// firmware is podhub firmware push|update: an operating-system bundle
// as a release, rolled out as podvisor's own are.
func (c *cli) firmware(args []string) error {
	if len(args) > 0 && args[0] == "update" {
		return c.update(args[1:], protocol.ReleaseFirmware)
	}
	if len(args) == 0 || args[0] != "push" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return helpFor(flag.NewFlagSet("firmware", flag.ContinueOnError))
		}
		return errors.New("usage: podhub firmware push --name N --version V --file BUNDLE [--compatible S] [--key FILE] | firmware update --name N --version V (--device ID | --selector k=v) [flags as update]")
	}
	fs := flag.NewFlagSet("firmware push", flag.ContinueOnError)
	name := fs.String("name", "", "the bundle's name (letters, digits, . _ + -)")
	version := fs.String("version", "", "the bundle's semantic version (v1.2.3)")
	file := fs.String("file", "", "the bundle (RAUC .raucb, SWUpdate .swu...), moved to devices as is")
	compatible := fs.String("compatible", "", "what the bundle is built for (RAUC's compatible), shown; the device's tool checks it")
	key := fs.String("key", "", "a separate ed25519 release key (PEM PRIVATE KEY) instead of the hub's")
	if pos, err := flags(fs, args[1:]); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("firmware push: unexpected argument %q", pos[0])
	}
	if *name == "" || *version == "" || *file == "" {
		return errors.New("firmware push: --name, --version and --file are required")
	}
	a, err := releases.Describe(*file, filepath.Base(*file), "")
	if err != nil {
		return err
	}
	rel := protocol.Release{Kind: protocol.ReleaseFirmware, Name: *name, Version: *version, Compatible: *compatible,
		Created: time.Now().UTC(), Artifacts: []protocol.Artifact{a}}
	sha, _ := a.Transfer()
	return c.pushRelease(rel, map[string]string{sha: *file}, *key)
}

// update is podhub update (kind agent) and podhub firmware update: a
// release rolled out in waves; or pause, resume or abort of an update.
func (c *cli) update(args []string, kind string) error {
	what := "update"
	if kind == protocol.ReleaseFirmware {
		what = "firmware update"
	}
	if len(args) > 0 && args[0] == "status" {
		return c.updateStatus(args[1:])
	}
	if len(args) == 2 && (args[0] == "pause" || args[0] == "resume" || args[0] == "abort") {
		var st updates.Status
		if err := c.client().Do("POST", "/v1/updates/"+url.PathEscape(args[1])+"/"+args[0], nil, &st); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "update/%s %s (%s)\n", args[1], map[string]string{"pause": "paused", "resume": "resumed", "abort": "aborted"}[args[0]], st.Phase)
		return nil
	}
	fs := flag.NewFlagSet(what, flag.ContinueOnError)
	req := updates.Request{Kind: kind, Release: "podvisor"}
	if kind == protocol.ReleaseFirmware {
		fs.StringVar(&req.Release, "name", "", "the bundle's name, as pushed")
	}
	fs.StringVar(&req.Version, "version", "", "the release's version, as pushed")
	fs.StringVar(&req.Device, "device", "", "one device")
	selector := fs.String("selector", "", "every device with these labels, as they are now: k=v[,k=v]")
	fs.StringVar(&req.MaxUnavailable, "max-unavailable", updates.DefaultMaxUnavailable, "devices updating at once: N, or N% of the targets (at least 1)")
	fs.StringVar(&req.FailureThreshold, "failure-threshold", updates.DefaultFailureThreshold, "the share of devices with a verdict that may fail before the update halts (judged once a wave's worth have one)")
	fs.BoolVar(&req.AllowDowngrade, "allow-downgrade", false, "let devices that run a newer version go back to this one")
	fs.StringVar(&req.Name, "update-name", "", "the update's name (default RELEASE-VERSION)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%s: unexpected argument %q (podhub update pause|resume|abort NAME)", what, pos[0])
	}
	if req.Version == "" || req.Release == "" {
		return fmt.Errorf("%s: --version is required (and --name for firmware)", what)
	}
	if (req.Device == "") == (*selector == "") {
		return fmt.Errorf("%s: give --device ID or --selector k=v", what)
	}
	if *selector != "" {
		if req.Selector, err = parseLabels(strings.Split(*selector, ","), false); err != nil {
			return err
		}
	}
	var spec updates.Spec
	if err := c.client().Do("POST", "/v1/updates", req, &spec); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "update/%s created: %s %s to %d device(s), at most %s at once (podhub describe update %s)\n",
		spec.Name, spec.Release, spec.Version, len(spec.Targets), spec.MaxUnavailable, spec.Name)
	return nil
}

// updateStatus prints an update's progress each time it changes until
// it completes (exit 0), halts or is aborted (exit 1, with the reason),
// or the timeout passes; as podhub rollout status does.
func (c *cli) updateStatus(args []string) error {
	fs := flag.NewFlagSet("update status", flag.ContinueOnError)
	watch := fs.Bool("watch", true, "wait until the update finishes")
	timeout := fs.Duration("timeout", 0, "how long to wait (0: for ever)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: podhub update status NAME [--watch=false] [--timeout D]")
	}
	var deadline time.Time
	if *timeout > 0 {
		deadline = time.Now().Add(*timeout)
	}
	last := ""
	for {
		var u api.UpdateInfo
		if err := c.client().Do("GET", "/v1/updates/"+url.PathEscape(pos[0]), nil, &u); err != nil {
			return err
		}
		st := u.Status
		switch st.Phase {
		case updates.Halted, updates.Aborted:
			return fmt.Errorf("update %s %s: %s", pos[0], strings.ToLower(st.Phase), st.Reason)
		case updates.Complete:
			msg := fmt.Sprintf("update %q complete: %d of %d devices run %s", pos[0], st.Done, st.Targets, u.Spec.Version)
			if st.Failed > 0 {
				msg += "; " + st.Reason
			}
			fmt.Fprintln(c.out, msg)
			return nil
		}
		msg := fmt.Sprintf("Waiting for update %q to finish: %d of %d done, %d failed, %d in progress, %d waiting, %d offline%s\n",
			pos[0], st.Done, st.Targets, st.Failed, st.InProgress, st.Waiting, st.Offline, map[bool]string{true: " (paused)"}[st.Phase == updates.Paused])
		if msg != last {
			fmt.Fprint(c.out, msg)
			last = msg
		}
		if !*watch {
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return errors.New("timed out waiting for the condition")
		}
		time.Sleep(time.Second)
	}
}

func (c *cli) getReleases(output string, now time.Time) error {
	var rs []api.ReleaseInfo
	if err := c.client().Do("GET", "/v1/releases", nil, &rs); err != nil {
		return err
	}
	if output != "" {
		return printObject(c, rs, output)
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tKIND\tVERSION\tARCH\tSIZE\tKEY\tAGE")
	for _, r := range rs {
		var total int64
		for _, a := range r.Artifacts {
			total += a.Size
		}
		arches := []string{}
		for _, a := range r.Artifacts {
			if a.Arch != "" && !strings.Contains(strings.Join(arches, ","), a.Arch) {
				arches = append(arches, a.Arch)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, r.Version, orNone(strings.Join(arches, ",")), size(total), r.KeyID, ago(now, r.Created))
	}
	return w.Flush()
}

func (c *cli) describeRelease(name, version string) error {
	var r api.ReleaseInfo
	if err := c.client().Do("GET", "/v1/releases/"+url.PathEscape(name)+"/"+url.PathEscape(version), nil, &r); err != nil {
		return err
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\nKind:\t%s\nVersion:\t%s\nKey:\t%s\nCreated:\t%s\n", r.Name, r.Kind, r.Version, r.KeyID, r.Created.Format(time.RFC3339))
	if r.Compatible != "" {
		fmt.Fprintf(w, "Compatible:\t%s\n", r.Compatible)
	}
	fmt.Fprintf(w, "Used by:\t%s\n", orNone(strings.Join(r.UsedBy, ", ")))
	fmt.Fprintln(w, "Artifacts:")
	for _, a := range r.Artifacts {
		wire := ""
		if a.Encoding != "" {
			wire = fmt.Sprintf(" (sent %s: %s, sha256:%s)", a.Encoding, size(a.WireSize), a.WireSHA256)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\tsha256:%s%s\n", orNone(a.Arch), a.Name, size(a.Size), a.SHA256, wire)
	}
	return w.Flush()
}

func (c *cli) getUpdates(output string, now time.Time) error {
	var us []api.UpdateInfo
	if err := c.client().Do("GET", "/v1/updates", nil, &us); err != nil {
		return err
	}
	if output != "" {
		return printObject(c, us, output)
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tRELEASE\tVERSION\tPHASE\tDONE\tFAILED\tIN-PROGRESS\tWAITING\tAGE")
	for _, u := range us {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\n", u.Spec.Name, u.Spec.Release, u.Spec.Version, u.Status.Phase,
			u.Status.Done, u.Status.Targets, u.Status.Failed, u.Status.InProgress, u.Status.Waiting+u.Status.Offline, ago(now, u.Spec.Created))
	}
	return w.Flush()
}

func (c *cli) describeUpdate(name string, now time.Time) error {
	var u api.UpdateInfo
	if err := c.client().Do("GET", "/v1/updates/"+url.PathEscape(name), nil, &u); err != nil {
		return err
	}
	s, st := u.Spec, u.Status
	w := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\nRelease:\t%s %s (%s)\n", s.Name, s.Release, s.Version, s.Kind)
	target := "device " + s.Device
	if s.Device == "" {
		target = "selector " + labelList(s.Selector)
	}
	fmt.Fprintf(w, "Targets:\t%d (%s)\n", len(s.Targets), target)
	fmt.Fprintf(w, "Max unavailable:\t%s (%d devices)\nFailure threshold:\t%s\n", s.MaxUnavailable, st.MaxUnavailable, s.FailureThreshold)
	if s.AllowDowngrade {
		fmt.Fprintln(w, "Allow downgrade:\tyes")
	}
	fmt.Fprintf(w, "Phase:\t%s\n", st.Phase)
	if st.Reason != "" {
		fmt.Fprintf(w, "Reason:\t%s\n", st.Reason)
	}
	fmt.Fprintf(w, "Progress:\t%d done, %d failed, %d in progress, %d waiting, %d offline\n", st.Done, st.Failed, st.InProgress, st.Waiting, st.Offline)
	fmt.Fprintf(w, "Created:\t%s ago\n", ago(now, s.Created))
	w.Flush()
	fmt.Fprintln(c.out, "Devices:")
	w = tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  DEVICE\tSTATE\tORDER\tREASON")
	for _, d := range st.Devices {
		state := d.State
		if d.Percent > 0 {
			state = fmt.Sprintf("%s %d%%", state, d.Percent)
		}
		order := "-"
		if d.Order > 0 {
			order = fmt.Sprint(d.Order)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", d.ID, state, order, d.Reason)
	}
	return w.Flush()
}

// updateColumn is a device's UPDATE column: the phase of its newest
// order (with percent), or the outcome with the reason.
func updateColumn(s *protocol.UpdateState) string {
	if s == nil {
		return "<none>"
	}
	out := s.Phase
	switch {
	case s.Phase == protocol.UpdateCommitted:
		out += " " + s.Version
	case protocol.UpdateDone(s.Phase):
		out += ": " + oneLine(s.Reason, 60)
	case s.Percent > 0:
		out += fmt.Sprintf(" %d%%", s.Percent)
	}
	return out
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// size is a byte count as a person reads it.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMi", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKi", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
