package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podvisor/podvisor/test/browser"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// The fleet dashboard in headless Chromium, end to end: podhub serve
// --http-listen with two real podvisor devices (zones a and b) and a
// DaemonSet. The dashboard needs a login (a token from podhub token
// create, through its form); its pages render; a pod's crash on a
// device shows on the open page within 2 s, without a reload; its token
// deleted or logged out, it is the login form again. The screenshots are saved and their
// paths logged.
func TestDashboardInChromium(t *testing.T) {
	addr := freeLoopback(t)
	h := newPodhub(t, "--http-listen", addr)
	base := "https://" + addr
	out, code := h.cli("token", "create", "viewer")
	if code != 0 {
		t.Fatalf("podhub token create: %s", out)
	}
	token, _, _ := strings.Cut(out, "\n")
	ids, daemons, _ := startFleet(t, h, 2)
	trigger := filepath.Join(t.TempDir(), "crash-now")
	daemons[ids[0]].write("crashy.yaml", processPod("crashy", "Always", 1,
		"while [ ! -e "+trigger+" ]; do sleep 0.05; done; exit 3"))
	ds := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(ds, []byte(workloadfile.File(workloadfile.DaemonSet("agent", `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- {name: main, image: host, command: ["sh", "-c", "exec sleep 1001"]}`))), 0o644)
	if out, code := h.cli("apply", "-f", ds); code != 0 {
		t.Fatalf("apply the DaemonSet: %s", out)
	}

	// Without a login the API answers 401 and the page goes to the form.
	caPEM, err := os.ReadFile(filepath.Join(h.dataDir, "pki", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	for path, want := range map[string]int{"/ui/api/devices": 401, "/ui/api/events": 401, "/ui/": 302} {
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a login: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// The browser trusts the hub's certificate alone (pinned), not every
	// certificate.
	certPEM, err := os.ReadFile(filepath.Join(h.dataDir, "pki", "http.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("pki/http.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	b := browser.Start(t, browser.Options{TrustCerts: []*x509.Certificate{cert}})
	b.Run(30*time.Second, "opening the dashboard", chromedp.Navigate(base+"/ui/#/devices"))
	b.WaitFor(10*time.Second, "the login form", `location.pathname === '/ui/login' && document.getElementById('token')`)
	b.Screenshot("login")
	b.Run(10*time.Second, "logging in", chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")))
	b.WaitFor(30*time.Second, "both devices Ready on the devices page",
		`document.body.dataset.view === 'devices' && [...document.querySelectorAll('tr[data-device] td.status')].filter(e => e.textContent === 'Ready').length === 2`)
	b.WaitFor(10*time.Second, "grouping by zone", choose("group-by", "zone"))
	b.WaitFor(10*time.Second, "the zone groups", `[...document.querySelectorAll('.group h2')].map(e => e.firstChild.textContent).join('|') === 'zone=a|zone=b'`)
	b.Screenshot("devices")

	b.Run(10*time.Second, "opening "+ids[0], chromedp.Navigate(base+"/ui/#/device/"+ids[0]))
	b.WaitFor(30*time.Second, ids[0]+"'s crashy and agent pods Running",
		`['default/crashy', 'default/agent-'].every(k => [...document.querySelectorAll('#device-pods tr[data-pod^="' + k + '"] td.status')].some(e => e.textContent === 'Running'))`)
	b.Screenshot("device")

	b.Run(10*time.Second, "opening the workloads page", chromedp.Navigate(base+"/ui/#/workloads"))
	b.WaitFor(30*time.Second, "the DaemonSet's rollout complete on both devices",
		`(document.querySelector('tr[data-workload="DaemonSet/default/agent"] td.status') || {}).textContent === 'Complete'`)
	b.Screenshot("workloads")

	b.Run(10*time.Second, "opening the pods page", chromedp.Navigate(base+"/ui/#/pods"))
	crashyStatus := `(document.querySelector('#pods tr[data-pod="default/crashy"] td.status') || {}).textContent`
	b.WaitFor(10*time.Second, "crashy Running on the pods page", crashyStatus+` === 'Running'`)
	b.WaitFor(10*time.Second, "the live stream open", `document.getElementById('live').textContent === 'live'`)
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The page polls nothing: only the live stream can bring the crash.
	// It takes about 150 ms here; 2 s was once not enough with other
	// packages' SQLite and PostgreSQL tests beside this one (fsyncs).
	took := b.WaitFor(5*time.Second, "crashy's crash on the open pods page", `['Error', 'CrashLoopBackOff'].includes(`+crashyStatus+`)`)
	t.Logf("the crash showed on the page %s after the pod was told to exit", took.Round(time.Millisecond))
	b.Screenshot("pods-after-crash")

	// The token deleted, the open page's next fetch (on the next change)
	// is refused and the page goes to the login form.
	if out, code := h.cli("token", "delete", "viewer"); code != 0 {
		t.Fatalf("podhub token delete: %s", out)
	}
	if out, code := h.cli("label", "device", ids[1], "touched=yes"); code != 0 {
		t.Fatalf("label: %s", out)
	}
	b.WaitFor(10*time.Second, "the login form once the token is deleted", `location.pathname === '/ui/login' && document.getElementById('token')`)

	// Logged in again with another token, then out: the dashboard is the
	// login form again.
	out, code = h.cli("token", "create", "viewer2")
	if code != 0 {
		t.Fatalf("podhub token create: %s", out)
	}
	token, _, _ = strings.Cut(out, "\n")
	b.Run(10*time.Second, "logging in again", chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")))
	b.WaitFor(30*time.Second, "the devices page", `document.body.dataset.view === 'devices' && document.querySelectorAll('tr[data-device]').length === 2`)
	b.Run(10*time.Second, "logging out", chromedp.Click(chromedp.ID("logout")))
	b.WaitFor(10*time.Second, "the login form after the logout", `location.pathname === '/ui/login' && document.getElementById('token')`)
	b.Run(10*time.Second, "opening the pods page logged out", chromedp.Navigate(base+"/ui/#/pods"))
	b.WaitFor(10*time.Second, "the login form for the pods page", `location.pathname === '/ui/login' && document.getElementById('token')`)
	// The fetch after the token's deletion was refused, as it should be.
	// ERR_NETWORK_CHANGED is Chromium cancelling what it had in flight
	// when the host's interfaces change: other tests' pods add and
	// remove veths beside this one. The waits above saw the pages
	// recover; the dashboard cannot prevent it.
	if errs := b.Errors(regexp.MustCompile(`status of 401|net::ERR_NETWORK_CHANGED`)); len(errs) > 0 {
		t.Fatalf("the pages reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// choose is a script choosing value in the select of the id as a person
// does (true once done; false while the select is not there).
func choose(id, value string) string {
	return `(() => { const s = document.getElementById('` + id + `'); if (!s) return false; s.value = '` + value +
		`'; s.dispatchEvent(new Event('change')); return true })()`
}
