package devmetrics

// Summary is the device's metrics in brief, fixed in size whatever runs:
// what rides the hub heartbeat (the uplink turns it into a
// protocol.MetricsSnapshot and adds its outbox).
type Summary struct {
	Since                   int64 // Unix seconds the counters count from
	RunningPods             int
	RunningContainers       int
	Evictions               uint64
	Preemptions             uint64
	StartedContainersErrors uint64
	ContainerRestarts       uint64
	ProbeFailures           uint64
	PodsCPUSeconds          float64
	PodsMemoryWorkingSet    uint64
	NodeMemoryWorkingSet    uint64
	NodeMemoryAvailable     uint64
	NodeFsAvailable         uint64
	// Pressure is PSI's some avg10 in percent; nil without PSI.
	Pressure *PressureSummary
}

// PressureSummary is PSI's some avg10 of each resource, in percent.
type PressureSummary struct{ CPU, Memory, IO float64 }

// Summary reads the summary now: the counters, and the pods' cgroups and
// the node's files.
func (c *Collector) Summary() Summary {
	r := c.rec
	st := r.state.Load()
	n := countPods(st.pods)
	s := Summary{Since: r.since.Unix(), RunningPods: n.runningPods, RunningContainers: n.runningContainers,
		Evictions: uint64(r.evictions.Total()), Preemptions: uint64(r.preemptions.Total()),
		StartedContainersErrors: uint64(r.startedContainerErrors.Total()), ContainerRestarts: r.restarts.Load()}
	r.probes.mu.Lock()
	s.ProbeFailures = r.probes.failures
	r.probes.mu.Unlock()
	for _, p := range readUsage(st, false).pods {
		if p.read {
			s.PodsCPUSeconds += float64(p.cpu) / 1e9
			s.PodsMemoryWorkingSet += p.mem
		}
	}
	if c.opts.Node != nil {
		if u, err := c.opts.Node.Usage(); err == nil {
			s.NodeMemoryWorkingSet, s.NodeMemoryAvailable, s.NodeFsAvailable = u.MemoryWorkingSet, u.MemoryAvailable, u.FsAvailable
		}
		if psi, err := c.opts.Node.Pressure(); err == nil && len(psi) > 0 {
			s.Pressure = &PressureSummary{}
			for _, p := range psi {
				switch p.Resource {
				case "cpu":
					s.Pressure.CPU = p.SomeAvg10
				case "memory":
					s.Pressure.Memory = p.SomeAvg10
				case "io":
					s.Pressure.IO = p.SomeAvg10
				}
			}
		}
	}
	return s
}
