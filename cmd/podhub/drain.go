package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
)

// caller is the hub's API as the drain uses it (api.Client).
type caller interface {
	Do(method, path string, body, into any) error
}

// drainer is `podhub drain device ID`: kubectl drain's steps over the
// hub's pods on a device.
type drainer struct {
	api         caller
	out, errOut io.Writer
	device      string
	// ignoreDaemonSets, deleteEmptyDir, force and disableEviction are
	// kubectl's flags.
	ignoreDaemonSets, deleteEmptyDir, force, disableEviction bool
	// timeout bounds the whole drain (0: none); grace is the deletion's
	// grace period (negative: the pod's own).
	timeout time.Duration
	grace   int64
	// retry is how long a refused eviction waits (kubectl's 5 s), poll
	// how often a pod evicted is looked for.
	retry, poll time.Duration
	mu          sync.Mutex // out and errOut
}

func (c *cli) drain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	d := &drainer{out: c.out, errOut: c.errOut, retry: 5 * time.Second, poll: time.Second}
	fs.BoolVar(&d.ignoreDaemonSets, "ignore-daemonsets", false, "ignore DaemonSet-managed pods")
	fs.BoolVar(&d.deleteEmptyDir, "delete-emptydir-data", false, "continue even if there are pods using emptyDir (their data goes with them)")
	fs.BoolVar(&d.force, "force", false, "continue even if there are pods that do not declare a controller")
	fs.BoolVar(&d.disableEviction, "disable-eviction", false, "delete pods instead of evicting them, bypassing PodDisruptionBudgets")
	fs.DurationVar(&d.timeout, "timeout", 0, "give up after this long (0: wait for ever)")
	fs.Int64Var(&d.grace, "grace-period", -1, "seconds each pod is given to stop (negative: the pod's own)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "device" {
		return errors.New("usage: podhub " + synopses["drain"])
	}
	d.api, d.device = c.client(), pos[1]
	return d.run(ctx)
}

func (d *drainer) printf(w io.Writer, format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(w, format, a...)
}

// run cordons the device, then evicts (or deletes) its hub pods, each
// until it is gone, and says the device is drained.
func (d *drainer) run(ctx context.Context) error {
	dev := url.PathEscape(d.device)
	if err := d.api.Do("PUT", "/v1/devices/"+dev+"/cordon", api.CordonRequest{Unschedulable: true}, nil); err != nil {
		return err
	}
	d.printf(d.out, "device/%s cordoned\n", d.device)
	var pods []v1.Pod
	if err := d.api.Do("GET", "/v1/devices/"+dev+"/hubpods", nil, &pods); err != nil {
		return err
	}
	keep, err := d.filter(pods)
	if err != nil {
		return fmt.Errorf("unable to drain device %q due to error: %w", d.device, err)
	}
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	errs := make([]error, len(keep))
	var wg sync.WaitGroup
	for i := range keep {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.remove(ctx, &keep[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unable to drain device %q due to error: %s", d.device, strings.ReplaceAll(err.Error(), "\n", ", "))
	}
	d.printf(d.out, "device/%s drained\n", d.device)
	return nil
}

// filter is kubectl's pod filters: DaemonSet pods are refused unless
// ignored (they would come back at once), pods with emptyDir data unless
// it may go, pods without a controller unless forced (nothing would make
// them again); pods that ended go freely.
func (d *drainer) filter(pods []v1.Pod) ([]v1.Pod, error) {
	var keep []v1.Pod
	var daemons, local, bare []string
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		ended := p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		ref := metav1.GetControllerOfNoCopy(&p)
		if ref != nil && ref.Kind == "DaemonSet" && !ended {
			daemons = append(daemons, name)
			continue
		}
		if !ended && hasEmptyDir(&p) {
			local = append(local, name)
		}
		if ref == nil && !ended {
			bare = append(bare, name)
		}
		keep = append(keep, p)
	}
	var fatal, warnings []string
	for _, f := range []struct {
		pods          []string
		allowed       bool
		fatal, warned string
	}{
		{daemons, d.ignoreDaemonSets, "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)", "ignoring DaemonSet-managed Pods"},
		{local, d.deleteEmptyDir, "cannot delete Pods with local storage (use --delete-emptydir-data to override)", "deleting Pods with local storage"},
		{bare, d.force, "cannot delete Pods that declare no controller (use --force to override)", "deleting Pods that declare no controller"},
	} {
		switch {
		case len(f.pods) == 0:
		case !f.allowed:
			fatal = append(fatal, f.fatal+": "+strings.Join(f.pods, ", "))
		default:
			warnings = append(warnings, f.warned+": "+strings.Join(f.pods, ", "))
		}
	}
	switch len(fatal) {
	case 0:
	case 1:
		return nil, errors.New(fatal[0])
	default:
		return nil, fmt.Errorf("[%s]", strings.Join(fatal, ", "))
	}
	if len(warnings) > 0 {
		d.printf(d.errOut, "Warning: %s\n", strings.Join(warnings, "; "))
	}
	return keep, nil
}

func hasEmptyDir(p *v1.Pod) bool {
	for _, vol := range p.Spec.Volumes {
		if vol.EmptyDir != nil {
			return true
		}
	}
	return false
}

// remove evicts a pod, retrying while its budget refuses (429), or
// deletes it with --disable-eviction; then waits for it to be gone.
func (d *drainer) remove(ctx context.Context, p *v1.Pod) error {
	path := "/v1/pods/" + url.PathEscape(p.Namespace) + "/" + url.PathEscape(p.Name)
	verb := "evicted"
	if d.disableEviction {
		verb = "deleted"
		if err := d.api.Do("DELETE", path, nil, nil); err != nil && !notFound(err) {
			return fmt.Errorf("error when deleting pod %q in namespace %q: %w", p.Name, p.Namespace, err)
		}
	} else if err := d.evict(ctx, p, path); err != nil {
		return err
	}
	if err := d.waitGone(ctx, p); err != nil {
		return fmt.Errorf("error when waiting for pod %q in namespace %q to terminate: %w", p.Name, p.Namespace, err)
	}
	d.printf(d.out, "pod/%s %s\n", p.Name, verb)
	return nil
}

func (d *drainer) evict(ctx context.Context, p *v1.Pod, path string) error {
	ev := policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	ev.Kind, ev.APIVersion = "Eviction", "policy/v1"
	if d.grace >= 0 {
		g := d.grace
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: &g}
	}
	for {
		d.printf(d.out, "evicting pod %s/%s\n", p.Namespace, p.Name)
		if ctx.Err() != nil {
			return fmt.Errorf("error when evicting pods/%q -n %q: global timeout reached: %v", p.Name, p.Namespace, d.timeout)
		}
		err := d.api.Do("POST", path+"/eviction", ev, nil)
		var apiErr *api.Error
		switch {
		case err == nil, notFound(err):
			return nil
		case errors.As(err, &apiErr) && apiErr.Code == http.StatusTooManyRequests:
			msg := fmt.Sprintf("error when evicting pods/%q -n %q (will retry after %v): %s\n", p.Name, p.Namespace, d.retry, apiErr.Message)
			if apiErr.Cause != "" {
				msg += "  " + apiErr.Cause + "\n"
			}
			d.printf(d.errOut, "%s", msg)
			select {
			case <-ctx.Done():
			case <-time.After(d.retry):
			}
		default:
			return fmt.Errorf("error when evicting pods/%q -n %q: %w", p.Name, p.Namespace, err)
		}
	}
}

// waitGone waits until the hub no longer holds the pod (its device
// confirmed it stopped), or holds another of its name (a new UID).
func (d *drainer) waitGone(ctx context.Context, p *v1.Pod) error {
	dev := url.PathEscape(d.device)
	for {
		var pods []v1.Pod
		if err := d.api.Do("GET", "/v1/devices/"+dev+"/hubpods", nil, &pods); err != nil {
			return err
		}
		present := false
		for _, q := range pods {
			present = present || (q.Namespace == p.Namespace && q.Name == p.Name && q.UID == p.UID)
		}
		if !present {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("global timeout reached: %v", d.timeout)
		case <-time.After(d.poll):
		}
	}
}

func notFound(err error) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound
}
