// Package browser runs Debian's Chromium headless for the dashboard's
// tests, driven by chromedp over the DevTools protocol, and saves their
// screenshots. It is for tests only: no binary links it.
package browser

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podvisor/podvisor/test/prereq"
)

// Browser is one headless Chromium with a fresh profile, and what its
// pages reported as errors (exceptions, console errors, refused loads
// and Content-Security-Policy violations).
type Browser struct {
	// Ctx runs chromedp actions in the browser's one tab.
	Ctx    context.Context
	t      testing.TB
	mu     sync.Mutex
	errors []string
}

// Options are how a test starts the browser.
type Options struct {
	// TrustCerts are server certificates the browser accepts although no
	// CA it knows signed them (pinned by their public keys, not every
	// certificate: --ignore-certificate-errors-spki-list).
	TrustCerts []*x509.Certificate
}

// executable is Chromium's path, or "" where none is installed.
func executable() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start starts Chromium headless (a missing Chromium is a missing
// prerequisite: skipped locally, a failure under CI) and stops it when
// the test ends. The flags keep it off the network: this machine's
// closed network refuses Chromium's own background connections.
func Start(t testing.TB, o Options) *Browser {
	t.Helper()
	path := executable()
	if path == "" {
		prereq.Missing(t, "chromium (Debian's package chromium) for the dashboard's browser test")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // root, as the tests run
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		// Its own temporary files (org.chromium.Chromium.*) in the test's
		// directory, gone with it.
		chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.WindowSize(1360, 900),
	}
	if len(o.TrustCerts) > 0 {
		var pins []string
		for _, c := range o.TrustCerts {
			sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
			pins = append(pins, base64.StdEncoding.EncodeToString(sum[:]))
		}
		opts = append(opts, chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(pins, ",")))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx, t: t}
	// The first action starts the browser, which lives as long as the
	// context of that action: so ctx itself, bounded by a timer that
	// cancels it.
	slow := time.AfterFunc(60*time.Second, cancelCtx)
	err := chromedp.Do(ctx)
	if !slow.Stop() {
		err = fmt.Errorf("not started within 60s: %w", err)
	}
	if err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("starting %s headless: %v", path, err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.errors = append(b.errors, string(m.Type)+": "+m.Text)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx() // closes the tab and the browser
		cancelAlloc()
		<-done
	})
	return b
}

// Errors are what the pages reported as errors so far; ignore lists
// patterns of expected ones (a 401 before the login, say).
func (b *Browser) Errors(ignore ...*regexp.Regexp) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, e := range b.errors {
		for _, re := range ignore {
			if re.MatchString(e) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// Run runs steps, bounded by within; a failure names what it did.
func (b *Browser) Run(within time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, within)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.Screenshot("failed-" + what)
		b.t.Fatalf("%s (within %s): %v", what, within, err)
	}
}

// Text is the text of the first element the CSS selector finds, waiting
// for it at most within.
func (b *Browser) Text(within time.Duration, sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, within)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		b.Screenshot("no-" + sel)
		b.t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// WaitFor polls a JavaScript condition until it is true, every 20 ms for
// at most within, and returns how long it took.
func (b *Browser) WaitFor(within time.Duration, what, cond string) time.Duration {
	b.t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			b.Screenshot("timeout-" + what)
			b.t.Fatalf("waited %s for %s (%s): %v", within, what, cond, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ScreenshotDir is where screenshots go: $PODVISOR_SCREENSHOTS, or
// bin/screenshots/ of the checkout (git-ignored).
func ScreenshotDir() (string, error) {
	if d := os.Getenv("PODVISOR_SCREENSHOTS"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(dir, "bin", "screenshots")
			return d, os.MkdirAll(d, 0o755)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory for bin/screenshots")
		}
		dir = parent
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Screenshot saves the whole page as PNG under ScreenshotDir, named for
// the test and name, and logs its path.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	dir, err := ScreenshotDir()
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(dir, unsafeName.ReplaceAllString(b.t.Name()+"-"+name, "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot: %s", path)
	return path
}
