package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
	"github.com/podvisor/podvisor/test/simfleet"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// The fleet scheduling benchmark's knobs.
var (
	schedDevices = flag.Int("sched-devices", 0, "simulated devices for the fleet scheduling measurement: a DaemonSet and a 1,000-replica zone-spread Deployment (0: skip)")
	schedOnly    = flag.Bool("sched-only", false, "measure only the fleet scheduling with -sched-devices simulated devices")
	schedChild   = flag.String("sched-child", "", "internal: simulate devices ADDR,DATADIR,DIR,FROM,COUNT for the scheduling measurement")
)

// schedShard is how many simulated devices one child process runs: each
// holds a TLS connection and a SQLite store (about four descriptors), and
// a process may hold 20,000 here.
const schedShard = 2500

// schedReplicas is the Deployment's replica count.
const schedReplicas = 1000

// schedManifest is what the operator applies: an agent on every device
// and a bridge spread evenly over the zones.
var schedManifest = workloadfile.File(workloadfile.DaemonSet("agent", schedContainer),
	workloadfile.Deployment("bridge", schedReplicas, workloadfile.Spread("zone", "bridge"), schedContainer))

// schedContainer is the one container of both workloads.
const schedContainer = `containers: [{name: c, image: "process:///bin/sleep", args: ["1000"], resources: {requests: {cpu: 10m, memory: 8Mi}}}]`

// schedBench runs podhub serve with n simulated devices (labels
// zone=z0..z9, heartbeats with allocatable) in child processes, applies
// the DaemonSet and the Deployment with podhub apply -f, and measures the
// time until the API shows every pod bound, the time until every device
// acked a desired document holding exactly its pods, and podhub's memory.
func schedBench(bin string, n int) error {
	if n <= 0 {
		return nil
	}
	ph, dir, podhub, done, err := fleetHub(bin, "podvisor-schedbench")
	if err != nil {
		return err
	}
	defer done()
	client, data := ph.client, ph.data
	fmt.Printf("\nfleet scheduling: podhub with %d simulated devices in 10 zones (%s, %d CPUs)\n", n, cpuModel(), runtime.NumCPU())
	connectStart := time.Now()
	if err := enrolSimDevices(client, n); err != nil {
		return err
	}
	applied := newAppliedPods()
	stopChildren, err := simChildren(ph, n, dir, "", applied.read)
	if err != nil {
		return err
	}
	defer stopChildren()
	connected := time.Since(connectStart)
	time.Sleep(5 * time.Second) // the connection storm's garbage collected
	idle := rss(ph.pid())

	manifest := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(manifest, []byte(schedManifest), 0o644); err != nil {
		return err
	}
	start := time.Now()
	if out, err := exec.Command(podhub, "--data-dir", data, "apply", "-f", manifest).CombinedOutput(); err != nil {
		return fmt.Errorf("podhub apply -f: %v %s", err, out)
	}
	applyDone := time.Since(start)
	var want map[string][]string // device -> its pods, sorted
	var zones map[string]int
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		var agents, bridges int
		agents, bridges, want, zones, err = boundPods(client)
		if err == nil && agents == n && bridges == schedReplicas {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 5 min the API shows %d of %d agent and %d of %d bridge pods bound (%v)", agents, n, bridges, schedReplicas, err)
		}
	}
	placed := time.Since(start)
	var ds []fleetdb.Device
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		err := client.Do("GET", "/v1/devices", nil, &ds)
		done := 0
		if err == nil {
			done = applied.ackedAll(ds, want)
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 5 min %d of %d devices acked a desired document holding their pods (%v)", done, n, err)
		}
	}
	acked := time.Since(start)
	full, pss := rss(ph.pid()), pssOf(ph.pid())
	perZone := slices.Sorted(func(yield func(int) bool) {
		for _, c := range zones {
			if !yield(c) {
				return
			}
		}
	})
	fmt.Printf("  all connected and Ready (TLS, client certificates)     %8.2f s\n", connected.Seconds())
	fmt.Printf("  podhub apply -f (DaemonSet + Deployment x%d)         %8.2f s\n", schedReplicas, applyDone.Seconds())
	fmt.Printf("  apply -> API shows all %d pods bound                %8.2f s  (bridge pods per zone %d..%d)\n", n+schedReplicas, placed.Seconds(), perZone[0], perZone[len(perZone)-1])
	fmt.Printf("  apply -> every device acked a document with its pods   %8.2f s\n", acked.Seconds())
	fmt.Printf("  podhub RSS idle fleet / scheduled                      %6.1f / %.1f MiB (PSS %.1f MiB)\n", idle.total, full.total, pss.pss)
	return nil
}

func schedID(i int) string { return fmt.Sprintf("sched-%05d", i) }

// boundPods counts the workloads' pods the API shows bound (not
// terminating), lists each device's, and counts the bridge pods by zone.
func boundPods(client *api.Client) (agents, bridges int, byDevice map[string][]string, zones map[string]int, err error) {
	var list v1.PodList
	if err := client.Do("GET", "/v1/pods", nil, &list); err != nil {
		return 0, 0, nil, nil, err
	}
	byDevice, zones = map[string][]string{}, map[string]int{}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		switch p.Labels["app"] {
		case "agent":
			agents++
		case "bridge":
			bridges++
			i, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "sched-"))
			zones[fmt.Sprintf("z%d", i%10)]++
		default:
			continue
		}
		byDevice[p.Spec.NodeName] = append(byDevice[p.Spec.NodeName], p.Namespace+"/"+p.Name)
	}
	for _, names := range byDevice {
		slices.Sort(names)
	}
	return agents, bridges, byDevice, zones, nil
}

// appliedPods is what each simulated device last applied, as its child
// process reports it: "DEVICE GENERATION ns/name,ns/name".
type appliedPods struct {
	mu   sync.Mutex
	gen  map[string]int64
	pods map[string][]string
}

func newAppliedPods() *appliedPods {
	return &appliedPods{gen: map[string]int64{}, pods: map[string][]string{}}
}

func (a *appliedPods) read(r io.Reader) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 4<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 2 {
			continue
		}
		gen, _ := strconv.ParseInt(f[1], 10, 64)
		var names []string
		if len(f) > 2 {
			names = strings.Split(f[2], ",")
		}
		a.mu.Lock()
		if gen >= a.gen[f[0]] {
			a.gen[f[0]], a.pods[f[0]] = gen, names
		}
		a.mu.Unlock()
	}
}

// ackedAll counts the devices that applied exactly the pods want gives
// them and whose ack of that generation the hub stored.
func (a *appliedPods) ackedAll(ds []fleetdb.Device, want map[string][]string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, d := range ds {
		gen, ok := a.gen[d.ID]
		if ok && d.ObservedGeneration >= gen && slices.Equal(a.pods[d.ID], want[d.ID]) {
			n++
		}
	}
	return n
}

// schedChildMain simulates the devices FROM..FROM+COUNT-1 (real agents,
// each with its own SQLite store and certificate from the hub's CA)
// until its standard input closes, reporting every document applied.
func schedChildMain(spec string) error {
	f := strings.Split(spec, ",")
	if len(f) != 5 && len(f) != 6 {
		return fmt.Errorf("-sched-child %q: want ADDR,DATADIR,DIR,FROM,COUNT[,READYAFTER]", spec)
	}
	// With READYAFTER, the devices report their pods Ready that long
	// after they start them (the rolling update measurement).
	var readyAfter time.Duration
	if len(f) == 6 {
		var err error
		if readyAfter, err = time.ParseDuration(f[5]); err != nil {
			return fmt.Errorf("-sched-child %q: READYAFTER: %w", spec, err)
		}
	}
	addr, data, dir := f[0], f[1], f[2]
	from, err1 := strconv.Atoi(f[3])
	count, err2 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("-sched-child %q: FROM and COUNT are numbers", spec)
	}
	enrolled, err := simfleet.LoadEnrolment(data, addr)
	if err != nil {
		return err
	}
	report := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stores []*store.Store
	for i := from; i < from+count; i++ {
		id := schedID(i)
		st, err := store.Open(filepath.Join(dir, "devices", id, "state.db"), store.DefaultLimits)
		if err != nil {
			return err
		}
		stores = append(stores, st)
		var pods uplink.Pods = simDevice{id: id, report: report}
		var rd *simfleet.ReadyDevice
		if readyAfter > 0 {
			rd = &simfleet.ReadyDevice{ID: id, ReadyAfter: readyAfter, Changed: showAvailability(report)}
			pods = rd
		}
		a, err := enrolled.Agent(id, st, pods, *hubHeartbeat, silent)
		if err != nil {
			return err
		}
		if rd != nil {
			rd.Attach(a) // before Run: nothing is applied before it starts
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(stop) }()
	}
	io.Copy(io.Discard, os.Stdin) // until the bench is done with us
	close(stop)
	wg.Wait()
	for _, st := range stores {
		st.Close()
	}
	return nil
}

// lineWriter writes whole lines from many goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.WriteString(s + "\n")
	l.w.Flush()
}

// simDevice is a simulated device's daemon: it accepts every pod, reports
// what it applied, and has room for many small pods.
type simDevice struct {
	id     string
	report *lineWriter
}

func (simDevice) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }

func (simDevice) Renew(time.Time) {}

func (s simDevice) ApplyAssigned(gen int64, pods []*v1.Pod, _ []string) {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	s.report.line(fmt.Sprintf("%s %d %s", s.id, gen, strings.Join(names, ",")))
}

func (simDevice) Node() (*v1.Node, error) { return simfleet.RoomyNode(), nil }

// schedMain runs the scheduling measurement alone (-sched-only), the
// rolling update alone (-rollout-only), or a child's share of either's
// simulated devices (-sched-child).
func schedMain(bin string) error {
	if *schedChild != "" {
		return schedChildMain(*schedChild)
	}
	if *rolloutOnly {
		if *rolloutDevices <= 0 {
			return fmt.Errorf("-rollout-only needs -rollout-devices > 0")
		}
		return rolloutBench(bin, *rolloutDevices, *rolloutReadyAfter)
	}
	if *schedDevices <= 0 {
		return fmt.Errorf("-sched-only needs -sched-devices > 0")
	}
	return schedBench(bin, *schedDevices)
}

// simChildren runs n simulated devices of podhub ph in child processes
// (-sched-child, schedShard each; readyAfter, "" or a duration, is the
// spec's last field), hands each child's output to read, and waits until
// the hub shows them all Ready. stop ends the children.
func simChildren(ph *podhubServe, n int, dir, readyAfter string, read func(io.Reader)) (stop func(), err error) {
	var children []*exec.Cmd
	var ins []io.Closer
	var readers sync.WaitGroup
	stop = func() {
		for _, in := range ins {
			in.Close() // the child stops
		}
		for _, c := range children {
			c.Process.Kill()
			c.Wait()
		}
		readers.Wait()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	for from := 0; from < n; from += schedShard {
		fields := []string{ph.addr, ph.data, dir, strconv.Itoa(from), strconv.Itoa(min(schedShard, n-from))}
		if readyAfter != "" {
			fields = append(fields, readyAfter)
		}
		c := exec.Command(os.Args[0], "-sched-child", strings.Join(fields, ","))
		c.Stderr = os.Stderr
		out, err := c.StdoutPipe()
		if err != nil {
			return nil, err
		}
		in, err := c.StdinPipe()
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
		if err := c.Start(); err != nil {
			return nil, err
		}
		children = append(children, c)
		readers.Add(1)
		go func() { defer readers.Done(); read(out) }()
	}
	var ds []fleetdb.Device
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		err := ph.client.Do("GET", "/v1/devices", nil, &ds)
		if err == nil && countReady(ds) == n {
			return stop, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d simulated devices Ready in 5 min (%v); podhub's log ends:\n%s", countReady(ds), n, err, lastLines(ph.log.String(), 30))
		}
	}
}

// fleetHub starts podhub serve (beside bin) in a temporary directory for
// a fleet of simulated devices, which heartbeat seldom (the benches
// measure scheduling, not heartbeats) and stay Ready for three periods.
// The returned podhub is its binary; done stops it and removes the
// directory.
func fleetHub(bin, name string) (ph *podhubServe, dir, podhub string, done func(), err error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, "", "", nil, err
	}
	dir, err = os.MkdirTemp("", name)
	if err != nil {
		return nil, "", "", nil, err
	}
	podhub = filepath.Join(filepath.Dir(abs), "podhub")
	ph, err = startPodhub(podhub, dir, "--device-timeout", (3 * *hubHeartbeat).String())
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", "", nil, err
	}
	return ph, dir, podhub, func() { ph.stop(); os.RemoveAll(dir) }, nil
}

// enrolSimDevices labels the simulated devices sched-00000.. with zones
// z0..z9: the hub believes only devices it knows.
func enrolSimDevices(client *api.Client, n int) error {
	for i := range n {
		if err := client.Do("PUT", "/v1/devices/"+schedID(i)+"/labels", map[string]string{"zone": fmt.Sprintf("z%d", i%10)}, nil); err != nil {
			return err
		}
	}
	return nil
}
