package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium, which the browser measurement needs.
const chromiumPath = "/usr/bin/chromium"

// observeChromium logs in to the dashboard in headless Chromium (the
// login form, with the bench's token: the session cookie then carries
// every request) and times the pods page from navigation until it
// shows its table: the HTML, the modules, the JSON and the render. The
// first load is apart (nothing cached); the later ones have the assets
// in the browser's cache, as an operator's visits have. Chromium's
// start is not timed.
func observeChromium(site hubSite, runs int, profile string) error {
	if _, err := os.Stat(chromiumPath); err != nil {
		fmt.Printf("    headless Chromium: not measured: %s not installed (Debian's chromium)\n", chromiumPath)
		return nil
	}
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return err
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // the bench runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// podhub's CA is not the browser's; this profile is thrown away.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(browser, 10*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil { // starts Chromium
		return fmt.Errorf("starting Chromium: %w", err)
	}
	version, _ := exec.Command(chromiumPath, "--version").Output()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(site.base+"/ui/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), site.token),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("main")),
	); err != nil {
		return fmt.Errorf("the dashboard's login in Chromium: %w", err)
	}
	var times, pageTimes []time.Duration
	var first time.Duration
	var firstInPage float64
	var rows int
	var count string
	for i := 0; i <= runs; i++ {
		if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
			return err
		}
		start := time.Now()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(site.base+"/ui/#/pods"),
			chromedp.WaitVisible(chromedp.CSS("#pods-page #pods-count")),
		); err != nil {
			return fmt.Errorf("the pods page in Chromium: %w", err)
		}
		took := time.Since(start)
		// The page's own clock from its navigation's start: the table
		// was shown by then (the read's round trip included).
		inPage, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.now()`))
		if err != nil {
			return err
		}
		if i == 0 {
			first, firstInPage = took, inPage
		} else {
			times = append(times, took)
			pageTimes = append(pageTimes, time.Duration(inPage*float64(time.Millisecond)))
		}
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#pods-page tbody tr').length`)); err != nil {
			return err
		}
		if count, err = chromedp.Run(ctx, chromedp.TextContent(chromedp.ID("pods-count"))); err != nil {
			return err
		}
	}
	fmt.Printf("    headless %s, the pods page (%d rows; %q):\n", strings.TrimSpace(string(version)), rows, count)
	fmt.Printf("      navigate /ui/#/pods -> table shown, as the bench sees it: first (cold cache) %.0f ms; then n=%d %s\n",
		float64(first)/1e6, len(times), dist(times))
	fmt.Printf("      the page's own clock at that point (performance.now()): first %.0f ms; then %s\n", firstInPage, dist(pageTimes))
	return nil
}
