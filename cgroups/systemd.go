package cgroups

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/podvisor/podvisor/pod/resources"
)

// Placer is a driver that can only make a container's cgroup from a
// running process: a systemd scope. The process is the container's shim;
// the container it forks inherits the scope.
type Placer interface {
	Place(path string, l resources.Limits, pid int) error
}

// Systemd is the systemd cgroup driver: the QoS tiers and pods are
// transient slices and containers transient scopes, made and limited
// through systemd's D-Bus API, so systemd knows every cgroup it holds
// and `systemctl status podvisor.slice` shows the pods. The same limits
// are then written to the files (the inner driver), which also reads
// stats and kills, as runc's systemd driver does.
//
// It needs cgroup v2: systemd's v1 support is legacy and its own layout
// there differs per controller.
type Systemd struct {
	inner Driver
	mount string
	conn  *sd.Conn
}

// jobTimeout bounds a systemd job (making or stopping a unit).
const jobTimeout = 10 * time.Second

// NewSystemd connects to systemd. It fails when systemd is not PID 1.
func NewSystemd(mount string) (*Systemd, error) {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return nil, errors.New("the systemd cgroup driver needs systemd as init (no /run/systemd/system)")
	}
	inner, err := Detect(mount)
	if err != nil {
		return nil, err
	}
	if inner.Version() != 2 {
		return nil, errors.New("the systemd cgroup driver needs cgroup v2 (this host has v1 controllers); use the cgroupfs driver")
	}
	// The context lives as long as the connection: canceling it closes it.
	conn, err := sd.NewWithContext(context.Background())
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd: %w", err)
	}
	return &Systemd{inner: inner, mount: mount, conn: conn}, nil
}

// Close ends the D-Bus connection.
func (s *Systemd) Close() { s.conn.Close() }

func (s *Systemd) Version() int { return s.inner.Version() }

// Ensure makes a slice (and, as systemd does, its parent slices) with the
// limits, or updates the limits of one that exists. A scope is made by
// Place; for it Ensure only writes the limits.
func (s *Systemd) Ensure(p string, l resources.Limits) error {
	unit := path.Base(p)
	if strings.HasSuffix(unit, ".slice") {
		props := append(s.properties(l), sd.PropDescription("podvisor "+unit), sd.PropWants(parentSlice(p)),
			sd.Property{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)})
		err := s.startUnit(unit, props)
		if isUnitExists(err) {
			err = s.conn.SetUnitPropertiesContext(context.Background(), unit, true, s.properties(l)...)
		}
		if err != nil {
			return fmt.Errorf("systemd slice %s: %w", unit, err)
		}
	}
	return s.inner.Ensure(p, l)
}

// Place makes the container's scope in its pod's slice from pid, with the
// limits. A scope of the same name left by an earlier start (still
// stopping, or failed after an OOM kill) is stopped and forgotten first.
func (s *Systemd) Place(p string, l resources.Limits, pid int) error {
	unit := path.Base(p)
	ctx := context.Background()
	s.conn.ResetFailedUnitContext(ctx, unit) // a failed scope would block the name
	props := append(s.properties(l), sd.PropDescription("podvisor container "+unit), sd.PropSlice(parentSlice(p)),
		sd.PropPids(uint32(pid)), sd.Property{Name: "Delegate", Value: dbus.MakeVariant(true)},
		sd.Property{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)})
	err := s.startUnit(unit, props)
	if isUnitExists(err) {
		s.stopUnit(unit)
		s.conn.ResetFailedUnitContext(ctx, unit)
		err = s.startUnit(unit, props)
	}
	if err != nil {
		return fmt.Errorf("systemd scope %s: %w", unit, err)
	}
	return s.inner.Ensure(p, l)
}

// Placement is empty: the daemon places the shim through Place.
func (s *Systemd) Placement(string) Placement { return Placement{} }

func (s *Systemd) Kill(p string) error { return s.inner.Kill(p) }

// Remove stops the unit (a pod's slice with its scopes); systemd removes
// the cgroups.
func (s *Systemd) Remove(p string) error {
	err := s.stopUnit(path.Base(p))
	if err != nil && !isNoSuchUnit(err) {
		return err
	}
	return nil
}

func (s *Systemd) Stats(p string) (Stats, error) { return s.inner.Stats(p) }
func (s *Systemd) Procs(p string) ([]int, error) { return s.inner.Procs(p) }

// OOMKills reads the counter while the cgroup exists. systemd removes a
// scope's cgroup with its last process, often before the daemon asks, so
// the shim reads it when its container dies (spec.cgroup.oomEvents).
func (s *Systemd) OOMKills(p string) (uint64, error) { return s.inner.OOMKills(p) }

// ShimCgroup makes "shims" in podvisor's own cgroup, where containers'
// shims live. That cgroup must be delegated to podvisor (Delegate=yes in
// its service): systemd leaves a delegated subtree to its owner and does
// not kill the shims when podvisor alone restarts (KillMode=process).
func (s *Systemd) ShimCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "0::")
	if !ok {
		return "", fmt.Errorf("own cgroup: unexpected /proc/self/cgroup %q", data)
	}
	unit := path.Base(own)
	prop, err := s.conn.GetUnitTypePropertyContext(context.Background(), unit, unitType(unit), "Delegate")
	if err != nil {
		return "", fmt.Errorf("own unit %s: %w", unit, err)
	}
	if delegated, _ := prop.Value.Value().(bool); !delegated {
		return "", fmt.Errorf("the systemd cgroup driver needs podvisor's unit (%s) to have Delegate=yes, as packaging/systemd/podvisor.service has", unit)
	}
	shims := path.Join(own, "shims")
	if err := os.Mkdir(path.Join(s.mount, shims), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return shims, nil
}

// unitType is "Service" for "x.service", as D-Bus interfaces name types.
func unitType(unit string) string {
	t := strings.TrimPrefix(path.Ext(unit), ".")
	if t == "" {
		return ""
	}
	return strings.ToUpper(t[:1]) + t[1:]
}

// parentSlice is the slice a unit at cgroup path p sits in.
func parentSlice(p string) string {
	dir := path.Dir(p)
	if dir == "." || dir == "/" {
		return "-.slice"
	}
	return path.Base(dir)
}

func isUnitExists(err error) bool { return dbusErrorIs(err, "org.freedesktop.systemd1.UnitExists") }
func isNoSuchUnit(err error) bool { return dbusErrorIs(err, "org.freedesktop.systemd1.NoSuchUnit") }

func dbusErrorIs(err error, name string) bool {
	var e dbus.Error
	return errors.As(err, &e) && e.Name == name
}

// properties are the limits as systemd unit properties, "infinity"
// (MaxUint64) where there is no limit.
func (s *Systemd) properties(l resources.Limits) []sd.Property {
	prop := func(name string, v any) sd.Property { return sd.Property{Name: name, Value: dbus.MakeVariant(v)} }
	orInfinity := func(v int64) uint64 {
		if v <= 0 {
			return math.MaxUint64
		}
		return uint64(v)
	}
	props := []sd.Property{prop("CPUAccounting", true), prop("MemoryAccounting", true), prop("TasksAccounting", true),
		prop("TasksMax", orInfinity(l.PidsMax))}
	quota := uint64(math.MaxUint64)
	if l.CPUQuota > 0 {
		quota = uint64(l.CPUQuota) * uint64(time.Second/time.Microsecond) / resources.QuotaPeriod
	}
	props = append(props, prop("CPUQuotaPerSecUSec", quota))
	weight := uint64(100)
	if l.CPUShares > 0 {
		weight = resources.CPUWeight(l.CPUShares)
	}
	return append(props, prop("CPUWeight", weight), prop("MemoryMax", orInfinity(l.MemoryMax)),
		prop("MemoryLow", uint64(max(l.MemoryLow, 0))))
}

func (s *Systemd) startUnit(unit string, props []sd.Property) error {
	return s.job(func(ctx context.Context, ch chan<- string) (int, error) {
		return s.conn.StartTransientUnitContext(ctx, unit, "replace", props, ch)
	})
}

func (s *Systemd) stopUnit(unit string) error {
	return s.job(func(ctx context.Context, ch chan<- string) (int, error) {
		return s.conn.StopUnitContext(ctx, unit, "replace", ch)
	})
}

// job runs a systemd job and waits for its result.
func (s *Systemd) job(start func(context.Context, chan<- string) (int, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	ch := make(chan string, 1)
	if _, err := start(ctx, ch); err != nil {
		return err
	}
	select {
	case result := <-ch:
		if result != "done" {
			return fmt.Errorf("systemd job %s", result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd job: no result within %s", jobTimeout)
	}
}
