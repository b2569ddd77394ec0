package dashboard

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/browser"
)

// The pages in a real Chromium over the handler alone (the end-to-end
// test, test/e2e, goes through podhub serve's login with real devices):
// they render, a device's markup stays text, the policy refuses nothing
// the page does, and a pod's crash shows without a reload.
func TestPagesInChromium(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(r.h)
	t.Cleanup(srv.Close) // after the browser's end, which closes its event stream
	b := browser.Start(t, browser.Options{})

	b.Run(30*time.Second, "opening the devices page", chromedp.Navigate(srv.URL+"/ui/"))
	b.WaitFor(10*time.Second, "the devices page", `document.body.dataset.view === 'devices' && document.querySelectorAll('tr[data-device]').length === 2`)
	b.WaitFor(10*time.Second, "grouping by zone", choose("group-by", "zone"))
	b.WaitFor(10*time.Second, "two zone groups", `[...document.querySelectorAll('.group h2')].map(e => e.firstChild.textContent).join('|') === 'zone=a|zone=b'`)
	b.Screenshot("devices-by-zone")

	b.Run(10*time.Second, "opening gw-1", chromedp.Click(chromedp.CSS(`a[href="#/device/gw-1"]`)))
	b.WaitFor(10*time.Second, "gw-1's page", `document.querySelector('#device-page[data-device="gw-1"] #device-pods')`)
	if got := b.Text(5*time.Second, `#device-pods tr[data-pod="default/crasher"] td.status`); got != "CrashLoopBackOff" {
		t.Fatalf("crasher's status on the device page: %q", got)
	}
	// Every device string went in as text: the markup shows, nothing ran.
	pwned := browser.Eval[string](b, `String(window.pwned)`)
	imgs := browser.Eval[int](b, `document.querySelectorAll('#main img, #main script').length`)
	if pwned != "undefined" || imgs != 0 {
		t.Fatalf("a device's markup became markup: window.pwned=%v, %d img/script elements", pwned, imgs)
	}
	if ev := b.Text(5*time.Second, `#events td.message`); ev != evil {
		t.Fatalf("the BackOff event's message shows as %q, want the text %q", ev, evil)
	}
	b.Screenshot("device")

	b.Run(10*time.Second, "opening the pods page", chromedp.Navigate(srv.URL+"/ui/#/pods"))
	b.WaitFor(10*time.Second, "the pods page", `document.querySelectorAll('#pods tr[data-pod]').length === 2`)
	// The agent crashes; the device reports it and the page shows it
	// without a reload.
	renders := browser.Eval[int](b, `Number(document.body.dataset.renders)`)
	crashed := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "main", RestartCount: 1,
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}}}}}
	start := time.Now()
	if _, _, _, err := r.fleet.ApplyStatus(&protocol.StatusBatch{Device: "gw-1", Epoch: "e1", After: 4,
		Items: []protocol.StatusItem{{Seq: 5, Key: "kube-system/agent", Pod: crashed}}}, now); err != nil {
		t.Fatal(err)
	}
	b.WaitFor(2*time.Second, "the agent's crash on the pods page", `(document.querySelector('#pods tr[data-pod="kube-system/agent"] td.status') || {}).textContent === 'Error'`)
	t.Logf("the crash showed %s after the hub stored it", time.Since(start).Round(time.Millisecond))
	if after := browser.Eval[int](b, `Number(document.body.dataset.renders)`); after <= renders {
		t.Fatalf("renders %d → %d", renders, after)
	}
	b.WaitFor(10*time.Second, "filtering the pods", choose("filter-phase", "Running"))
	b.WaitFor(10*time.Second, "the filtered pods", `location.hash.includes('phase=Running') && document.getElementById('pods-count').textContent === '2 of 2 pods'`)
	b.Screenshot("pods")

	b.Run(10*time.Second, "opening the workloads page", chromedp.Navigate(srv.URL+"/ui/#/workloads"))
	b.WaitFor(10*time.Second, "the workloads page", `document.querySelector('#workloads tr[data-workload="Deployment/shop/web"]')`)
	if got := b.Text(5*time.Second, `#workloads tr[data-workload="Deployment/shop/web"] td.status`); got != "Paused" {
		t.Fatalf("web's state %q, want Paused", got)
	}
	b.Screenshot("workloads")
	if errs := b.Errors(); len(errs) > 0 {
		t.Fatalf("the pages reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// choose is a script choosing value in the select of the id as a person
// does (true once done; false while the select is not there).
func choose(id, value string) string {
	return `(() => { const s = document.getElementById('` + id + `'); if (!s) return false; s.value = '` + value +
		`'; s.dispatchEvent(new Event('change')); return true })()`
}
