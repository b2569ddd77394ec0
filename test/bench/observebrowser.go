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
// start is not timed. Then what the page left open costs podhub (hubPID).
func observeChromium(site hubSite, runs int, profile string, hubPID int) error {
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
		// Its temporary files beside the profile, removed with it.
		chromedp.Env("TMPDIR="+profile),
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
	// Each load, by the bench's clock and the page's own (from its
	// navigation's start: performance.now() when the table shows, and
	// the resource timing of the JSON's fetch).
	type load struct {
		wall, inPage, asked, fetch time.Duration
	}
	var loads []load
	var rows int
	var count string
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
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
		l := load{wall: time.Since(start)}
		t, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
			const e = performance.getEntriesByType('resource').filter(r => r.name.includes('/ui/api/pods')).pop();
			return [performance.now(), e ? e.startTime : 0, e ? e.responseEnd : 0];
		})()`))
		if err != nil {
			return err
		}
		if len(t) == 3 {
			l.inPage, l.asked, l.fetch = ms(t[0]), ms(t[1]), ms(t[2]-t[1])
		}
		loads = append(loads, l)
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#pods-page tbody tr').length`)); err != nil {
			return err
		}
		if count, err = chromedp.Run(ctx, chromedp.TextContent(chromedp.ID("pods-count"))); err != nil {
			return err
		}
	}
	column := func(f func(load) time.Duration) []time.Duration {
		var out []time.Duration
		for _, l := range loads[1:] {
			out = append(out, f(l))
		}
		return out
	}
	first := loads[0]
	fmt.Printf("    headless %s, the pods page (%d rows; %q), first load (cold cache) apart, then n=%d:\n",
		strings.TrimSpace(string(version)), rows, count, len(loads)-1)
	fmt.Printf("      navigate /ui/#/pods -> table shown (bench's clock)   first %6.0f ms; %s\n", float64(first.wall)/1e6, dist(column(func(l load) time.Duration { return l.wall })))
	fmt.Printf("      the same by the page's clock (performance.now())    first %6.0f ms; %s\n", float64(first.inPage)/1e6, dist(column(func(l load) time.Duration { return l.inPage })))
	fmt.Printf("        of which until the page asked for api/pods        first %6.0f ms; %s\n", float64(first.asked)/1e6, dist(column(func(l load) time.Duration { return l.asked })))
	fmt.Printf("        of which the api/pods fetch                       first %6.0f ms; %s\n", float64(first.fetch)/1e6, dist(column(func(l load) time.Duration { return l.fetch })))
	var each []string
	for _, l := range loads {
		each = append(each, fmt.Sprintf("%.2f", l.wall.Seconds()))
	}
	fmt.Printf("      each load, s: %s\n", strings.Join(each, " "))
	return openPageCost(ctx, site.base, hubPID)
}

// openPageCost measures what the pods page left open costs the hub: its
// live updates make it fetch again whatever a change touches. podhub's
// CPU over a window with the page open against one with none, and the
// fetches the page made meanwhile.
func openPageCost(ctx context.Context, base string, hubPID int) error {
	const window = 10 * time.Second
	fetches := `performance.getEntriesByType('resource').filter(r => r.name.includes('/ui/api/pods')).length`
	cpuOver := func() float64 {
		c0, _ := cpuTicks(hubPID)
		time.Sleep(window)
		c1, _ := cpuTicks(hubPID)
		return float64(c1-c0) / clockTicks
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return err
	}
	closed := cpuOver()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/ui/#/pods"),
		chromedp.WaitVisible(chromedp.CSS("#pods-page #pods-count"))); err != nil {
		return err
	}
	before, err := chromedp.Run(ctx, chromedp.Evaluate[int](fetches))
	if err != nil {
		return err
	}
	open := cpuOver()
	after, err := chromedp.Run(ctx, chromedp.Evaluate[int](fetches))
	if err != nil {
		return err
	}
	fmt.Printf("      left open %s (the fleet idle but for heartbeats): %d fetches of api/pods; podhub CPU %.2f s, against %.2f s with no page open\n",
		window, after-before, open, closed)
	return nil
}
