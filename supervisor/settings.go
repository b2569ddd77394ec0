package supervisor

import (
	"os"
	"time"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor/desired"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/sdnotify"
)

// Options are what cmd/podvisor decides beside the config file: which
// runtimes run here (registered plugins, each with the settings it found
// on this host; DefaultRuntime runs the pods that name no runtime class)
// and the version the node reports; the service manager to notify, if
// any.
type Options struct {
	Runtimes       []runtime.Choice
	DefaultRuntime string
	Version        string
	// Notify is systemd's notify socket (nil: none, nothing is sent).
	Notify *sdnotify.Socket
}

// The daemon reads config.Config itself; these give each part the section
// it uses, in that part's own types. The values and their defaults are the
// config's (config.Default): nothing here fills in a default.

// coreConfig is the lifecycle core's: the file's backoff, the daemon's
// save batching, and the kubelet's fixed minimum grace period.
func coreConfig(c *config.Config) lifecycle.Config {
	lc := lifecycle.DefaultConfig()
	lc.BackoffInitial, lc.BackoffMax, lc.BackoffReset = c.Backoff.Initial.Duration, c.Backoff.Max.Duration, c.Backoff.Reset.Duration
	lc.SaveDelay = c.SaveDelay
	return lc
}

func evictionConfig(c *config.Config) nodeprotect.EvictionConfig {
	ev := c.Eviction
	return nodeprotect.EvictionConfig{Hard: c.EvictionHard(), Soft: ev.Soft, SoftGracePeriod: ev.SoftGracePeriod,
		MinimumReclaim: ev.MinimumReclaim, MaxPodGracePeriod: ev.MaxPodGracePeriod.Duration,
		PressureTransitionPeriod: ev.PressureTransitionPeriod.Duration, MonitorPeriod: ev.MonitorPeriod.Duration}
}

func nodeConfig(c *config.Config, version string) nodeprotect.NodeConfig {
	return nodeprotect.NodeConfig{MaxPods: c.Node.MaxPods, SystemReserved: c.Node.SystemReserved,
		PodvisorReserved: c.Node.PodvisorReserved, EvictionHard: c.EvictionHard(), Version: version}
}

// ShutdownBuckets order a node shutdown or drain.
func ShutdownBuckets(c *config.Config) []nodeprotect.ShutdownBucket {
	var buckets []nodeprotect.ShutdownBucket
	for _, b := range c.ShutdownGracePeriodByPodPriority {
		buckets = append(buckets, nodeprotect.ShutdownBucket{Priority: b.Priority,
			GracePeriod: time.Duration(b.ShutdownGracePeriodSeconds) * time.Second})
	}
	return buckets
}

// ShutdownTime is how long a drain by the config's buckets may take at
// most.
func ShutdownTime(c *config.Config) time.Duration {
	return nodeprotect.ShutdownTime(ShutdownBuckets(c))
}

// devicePolicy is what every pod is held to, and what the hub's pods are
// held to on top (a process pod from the hub that names no user runs as
// the daemon's).
func devicePolicy(c *config.Config) (desired.Policy, error) {
	hub, err := c.Hub.PodPolicy(int64(os.Geteuid()))
	if err != nil {
		return desired.Policy{}, c.FieldError("hub", err)
	}
	return desired.Policy{ForbidPrivileged: c.Security.ForbidPrivileged, AllowedHostPaths: c.Security.AllowedHostPaths, Hub: hub}, nil
}
