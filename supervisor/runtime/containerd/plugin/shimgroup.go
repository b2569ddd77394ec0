package plugin

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// A pod's own shim (containerd.shimGroup: pod) lives as long as a task of
// the pod's containers does: containerd's runc shim exits when its last
// task is deleted (measured: at once), and a container restarted after
// that pays for a new shim. So the ended task of a pod's last container
// is parked instead of deleted when the daemon removes it, and deleted
// once a new task of the pod runs (it joined the live shim) or the pod is
// gone (ForgetShimGroup).
const (
	// labelShimGroup is a container's shim group, as its annotation says.
	labelShimGroup = "io.podvisor.shim-group"
	// labelParked marks a removed container kept for its pod's shim.
	labelParked = "io.podvisor.parked"
)

// maxParked is how long a parked container waits for its pod's next
// task: longer than the longest crash-loop back-off (5 min). One older
// was left by a pod that went while no daemon ran; List deletes it.
const maxParked = 10 * time.Minute

// parked reports whether a container is parked, and deletes it if it
// was parked longer than maxParked: either way the daemon removed it.
func (p *Plugin) parked(ctx context.Context, c ctrd.Container, labels map[string]string) bool {
	at, err := strconv.ParseInt(labels[labelParked], 10, 64)
	if labels[labelParked] == "" {
		return false
	}
	if err != nil || time.Since(time.Unix(at, 0)) > maxParked {
		if err := p.deleteContainer(ctx, c); err != nil {
			p.log.Warn("deleting a parked container", "id", c.ID(), "err", err)
		}
	}
	return true
}

// podShimGroup is the shim group of a container that shares a shim with
// its pod's containers only, else "".
func podShimGroup(labels map[string]string) string {
	if g := labels[labelShimGroup]; g != "" && g == labels[pluginapi.LabelPodUID] {
		return g
	}
	return ""
}

// forgottenGroups are the pod groups ForgetShimGroup ended, so that a
// removal that comes after it (the daemon removes in the background)
// parks nothing.
type forgottenGroups struct {
	mu    sync.Mutex
	order []string
	set   map[string]bool
}

// maxForgotten bounds the groups remembered: more than a device's pods.
const maxForgotten = 1024

func (f *forgottenGroups) add(g string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set = map[string]bool{}
	}
	if f.set[g] {
		return
	}
	if len(f.order) == maxForgotten {
		delete(f.set, f.order[0])
		f.order = f.order[1:]
	}
	f.order = append(f.order, g)
	f.set[g] = true
}

func (f *forgottenGroups) has(g string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set[g]
}

// park keeps a removed container whose ended task is the last of its
// pod's shim, and reports whether it did. The daemon does not see it any
// more (List leaves it out).
func (p *Plugin) park(ctx context.Context, c ctrd.Container, labels map[string]string) bool {
	g := podShimGroup(labels)
	if g == "" || labels[labelParked] != "" || p.forgotten.has(g) {
		return false
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return false
	}
	if st, err := task.Status(ctx); err != nil || st.Status != ctrd.Stopped {
		return false
	}
	members, err := p.groupContainers(ctx, g)
	if err != nil {
		return false
	}
	for _, o := range members {
		if o.ID() == c.ID() {
			continue
		}
		if _, err := o.Task(ctx, nil); err == nil {
			return false // another task keeps the shim
		}
	}
	_, err = c.SetLabels(ctx, map[string]string{labelParked: strconv.FormatInt(time.Now().Unix(), 10)})
	return err == nil
}

// groupContainers are the containers of a shim group.
func (p *Plugin) groupContainers(ctx context.Context, g string) ([]ctrd.Container, error) {
	return p.client.Containers(ctx, fmt.Sprintf(`labels.%q==%q`, labelShimGroup, g))
}

// removeParked deletes the parked containers of a pod's shim group.
func (p *Plugin) removeParked(ctx context.Context, g string) error {
	members, err := p.groupContainers(ctx, g)
	if err != nil {
		return err
	}
	for _, c := range members {
		labels, err := c.Labels(ctx)
		if err != nil || labels[labelParked] == "" {
			continue
		}
		if err := p.deleteContainer(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// ForgetShimGroup deletes what was kept for a pod's shim: the pod is gone.
func (p *Plugin) ForgetShimGroup(args pluginapi.GroupArgs, _ *pluginapi.Empty) error {
	p.forgotten.add(args.Group)
	return p.removeParked(p.ctx(), args.Group)
}

// deleteContainer deletes a container, its task (killed if it still
// runs), its snapshot and its FIFOs.
func (p *Plugin) deleteContainer(ctx context.Context, c ctrd.Container) error {
	if task, err := c.Task(ctx, p.logs.removeFIFOs); err == nil {
		if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("deleting task of %s: %w", c.ID(), err)
		}
	}
	p.logs.finish(c.ID())
	if err := c.Delete(ctx, ctrd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting container %s: %w", c.ID(), err)
	}
	return nil
}
