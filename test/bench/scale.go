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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// make bench-scale (issue 29): one fleet of simulated devices against
// three setups in one run — podhub on SQLite, podhub on PostgreSQL, and
// replicas on PostgreSQL behind a NATS cluster — measuring for each the
// time until every device is Ready, the pod statuses stored per second
// under a steady offered load, the time from applying a DaemonSet to
// every device's ack stored, and the memory of every process serving
// the fleet (docs/scale.md).
var (
	scaleOnly     = flag.Bool("scale-only", false, "measure only the fleet at scale (make bench-scale): -scale-devices against each of -scale-setups")
	scaleDevices  = flag.Int("scale-devices", 10000, "simulated devices of the scale measurement")
	scaleSetups   = flag.String("scale-setups", "sqlite,postgres,replicas-embedded,replicas", "the scale measurement's setups, in order: sqlite, postgres, replicas-embedded (replicas behind the first one's embedded broker), replicas (behind NATS)")
	scaleReplicas = flag.Int("scale-replicas", 3, "podhub replicas of the replicas setup")
	scaleRate     = flag.Float64("scale-status-rate", 10000, "pod statuses a second the simulated devices offer together in the status window")
	scaleWindow   = flag.Duration("scale-status-window", 30*time.Second, "how long the stored statuses are counted (after 5 s of warm-up)")
	scaleReadyIn  = flag.Duration("scale-ready-within", 8*time.Minute, "how long a setup may take until every device is Ready")
	scaleApplyIn  = flag.Duration("scale-apply-within", 3*time.Minute, "how long a setup may take until every device applied the DaemonSet, and again until every ack is stored")
	scaleNATSMQTT = flag.String("scale-nats-mqtt", "", "more settings of the NATS nodes' mqtt block, separated by ';' (such as \"consumer_replicas: 1; consumer_memory_storage: true\")")
	scaleChild    = flag.String("scale-child", "", "internal: simulate devices ADDR[+ADDR…],DATADIR,DIR,FROM,COUNT for the scale measurement")
)

// scaleShard is how many simulated devices one child process runs.
const scaleShard = 2500

// scaleResult is what one setup measured.
type scaleResult struct {
	setup           string
	hubs, brokers   int
	ready           time.Duration // until every device was Ready
	readyN          int           // devices Ready (all but on a timeout)
	stored, offered float64       // statuses a second
	cpuPerStatus    [3]float64    // µs of CPU per stored status: podhubs, brokers, database
	applied, acked  time.Duration // DaemonSet applied -> every device applied it, every ack stored
	// Memory: RSS MiB of each podhub and broker node, PSS MiB of the
	// database server; before the devices, with them connected (idle),
	// and after the statuses and the apply.
	hubIdle, hubConn, hubFull []float64
	brkIdle, brkConn, brkFull []float64
	dbIdle, dbConn, dbFull    float64
	storeBytes                int64 // the fleet store's size at the end
	err                       error
}

// scaleBench runs the scale measurement.
func scaleBench(bin string) error {
	if *scaleChild != "" {
		return scaleChildMain(*scaleChild)
	}
	n := *scaleDevices
	if n <= 0 {
		return fmt.Errorf("-scale-only needs -scale-devices > 0")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	podhub := filepath.Join(filepath.Dir(abs), "podhub")
	setups := strings.Split(*scaleSetups, ",")
	fmt.Printf("fleet at scale: %d simulated devices (%d pods each), %s, %d CPUs, kernel %s, %s\n", n, scalePods, cpuModel(), runtime.NumCPU(), kernel(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  statuses offered %.0f/s for %v; devices heartbeat every %v; setups: %s\n", *scaleRate, *scaleWindow, *hubHeartbeat, strings.Join(setups, ", "))
	if *scaleNATSMQTT != "" {
		fmt.Printf("  NATS mqtt settings beside the tested ones: %s\n", *scaleNATSMQTT)
	}
	var pg *pgtest.Server
	for _, s := range setups {
		if s == setupPostgres || s == setupReplicas || s == setupReplicasEmbedded {
			// Durable as a production server (fsync and full pages on),
			// commits not waiting for their flush (as SQLite's WAL with
			// synchronous=NORMAL): the tests' settings are for speed.
			pg, err = pgtest.StartServer("fsync=on", "full_page_writes=on", "synchronous_commit=off",
				"shared_buffers=128MB", "max_connections=100")
			if err != nil {
				return err
			}
			defer pg.Stop()
			var version string
			out, _ := exec.Command("sh", "-c", "ls /usr/lib/postgresql | sort -n | tail -1").Output()
			version = strings.TrimSpace(string(out))
			fmt.Printf("  PostgreSQL %s (private server: fsync on, synchronous_commit off, shared_buffers 128MB)\n", version)
			break
		}
	}
	var results []scaleResult
	for _, s := range setups {
		r := scaleOne(s, podhub, pg, n)
		if r.err != nil {
			fmt.Printf("  %s: %v\n", s, r.err)
		}
		results = append(results, r)
	}
	printScale(results, n)
	for _, r := range results {
		if r.err != nil {
			return fmt.Errorf("setup %s: %w", r.setup, r.err)
		}
	}
	return nil
}

// scaleOne measures one setup with n devices.
func scaleOne(name, podhub string, pg *pgtest.Server, n int) (r scaleResult) {
	r.setup = name
	dir, err := os.MkdirTemp("", "podvisor-scalebench")
	if err != nil {
		r.err = err
		return r
	}
	defer os.RemoveAll(dir)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = scaleID(i)
	}
	s, err := startScaleSetup(name, podhub, dir, pg, ids)
	if err != nil {
		r.err = err
		return r
	}
	defer s.stop()
	r.hubs, r.brokers = len(s.hubs), len(s.brokers)
	fmt.Printf("\n%s: %d podhub, %d broker node(s)%s\n", name, len(s.hubs), max(len(s.brokers), 1),
		map[bool]string{true: " (embedded)", false: ""}[len(s.brokers) == 0])
	time.Sleep(2 * time.Second)
	r.hubIdle, r.brkIdle, r.dbIdle = s.memory()
	// Enrolled first, as an operator does (not timed): the hub believes
	// only devices it knows. Through the last podhub: any replica serves.
	api := s.hubs[len(s.hubs)-1].client
	enrolStart := time.Now()
	if err := enrolScale(api, ids); err != nil {
		r.err = err
		return r
	}
	fmt.Printf("  %d devices enrolled (labelled through the API) %8.1f s\n", n, time.Since(enrolStart).Seconds())
	devDir, err := os.MkdirTemp("/dev/shm", "podvisor-scalebench-devices")
	if err != nil {
		devDir = filepath.Join(dir, "devices")
	}
	defer os.RemoveAll(devDir)
	start := time.Now()
	fleet, err := startScaleFleet(s.addrs, s.hubs[0].data, devDir, n)
	if err != nil {
		r.err = err
		return r
	}
	defer fleet.stop()
	var ds []fleetdb.Device
	for deadline := time.Now().Add(*scaleReadyIn); ; time.Sleep(time.Second) {
		err := api.Do("GET", "/v1/devices", nil, &ds)
		if r.readyN = countReady(ds); err == nil && r.readyN == n {
			break
		}
		if time.Now().After(deadline) {
			// What the connected part of the fleet costs, still.
			r.hubConn, r.brkConn, r.dbConn = s.memory()
			fmt.Printf("  memory with %d devices Ready: podhub RSS %s MiB; brokers RSS %s MiB; database PSS %.1f MiB\n",
				r.readyN, mibs(r.hubConn), mibs(r.brkConn), r.dbConn)
			r.err = fmt.Errorf("only %d of %d devices Ready within %v (last listing error: %v)\n%s", r.readyN, n, *scaleReadyIn, err, s.logs())
			return r
		}
	}
	r.ready = time.Since(start)
	fmt.Printf("  all %d devices connected and Ready          %8.1f s\n", n, r.ready.Seconds())
	time.Sleep(5 * time.Second) // the connection storm's garbage collected
	r.hubConn, r.brkConn, r.dbConn = s.memory()
	fmt.Printf("  memory with the fleet connected: podhub RSS %s MiB; brokers RSS %s MiB; database PSS %.1f MiB\n",
		mibs(r.hubConn), mibs(r.brkConn), r.dbConn)

	// Statuses: the offered load for a warm-up, then counted.
	fleet.setRate(*scaleRate)
	time.Sleep(5 * time.Second)
	acked0, pub0, err := fleet.progress()
	if err != nil {
		r.err = err
		return r
	}
	h0, b0, d0 := s.cpuTicks()
	t0 := time.Now()
	time.Sleep(*scaleWindow)
	acked1, pub1, err := fleet.progress()
	if err != nil {
		r.err = err
		return r
	}
	h1, b1, d1 := s.cpuTicks()
	window := time.Since(t0).Seconds()
	fleet.setRate(0)
	r.stored, r.offered = float64(acked1-acked0)/window, float64(pub1-pub0)/window
	if stored := acked1 - acked0; stored > 0 {
		for i, ticks := range []uint64{h1 - h0, b1 - b0, d1 - d0} {
			r.cpuPerStatus[i] = float64(ticks) / clockTicks * 1e6 / float64(stored)
		}
	}
	fmt.Printf("  pod statuses stored (receipts)              %8.0f /s  (offered %.0f/s; CPU per status: podhub %.0f µs, broker %.0f µs, database %.0f µs)\n",
		r.stored, r.offered, r.cpuPerStatus[0], r.cpuPerStatus[1], r.cpuPerStatus[2])
	// The backlog drains (what coalesced is gone) before the apply.
	for last, quiet, deadline := acked1, 0, time.Now().Add(time.Minute); quiet < 3 && time.Now().Before(deadline); time.Sleep(time.Second) {
		a, _, err := fleet.progress()
		if err != nil {
			r.err = err
			return r
		}
		if a == last {
			quiet++
		} else {
			quiet, last = 0, a
		}
	}

	// A DaemonSet on every device, applied through the last podhub.
	manifest := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(manifest, []byte(workloadfile.DaemonSet("agent", schedContainer)), 0o644); err != nil {
		r.err = err
		return r
	}
	last := s.hubs[len(s.hubs)-1]
	start = time.Now()
	if out, err := exec.Command(podhub, "--data-dir", last.data, "apply", "-f", manifest).CombinedOutput(); err != nil {
		r.err = fmt.Errorf("podhub apply -f: %v %s", err, out)
		return r
	}
	if err := fleet.waitApplied(n, *scaleApplyIn); err != nil {
		r.err = fmt.Errorf("%w\n%s", err, s.logs())
		return r
	}
	r.applied = time.Since(start)
	for deadline := time.Now().Add(*scaleApplyIn); ; time.Sleep(time.Second) {
		err := api.Do("GET", "/v1/devices", nil, &ds)
		done := 0
		if err == nil {
			done = fleet.ackedAt(ds)
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			r.err = fmt.Errorf("after %v the hub stored %d of %d devices' acks of the DaemonSet's document (%v)\n%s", *scaleApplyIn, done, n, err, s.logs())
			return r
		}
	}
	r.acked = time.Since(start)
	fmt.Printf("  DaemonSet applied -> every device applied   %8.1f s, every ack stored %.1f s\n", r.applied.Seconds(), r.acked.Seconds())
	r.hubFull, r.brkFull, r.dbFull = s.memory()
	fmt.Printf("  memory after: podhub RSS %s MiB; brokers RSS %s MiB; database PSS %.1f MiB (before the devices: %s / %s / %.1f)\n",
		mibs(r.hubFull), mibs(r.brkFull), r.dbFull, mibs(r.hubIdle), mibs(r.brkIdle), r.dbIdle)
	if r.storeBytes, err = s.storeSize(); err != nil {
		fmt.Printf("  fleet store size: %v\n", err)
	} else {
		fmt.Printf("  fleet store size %.1f MiB (%.1f KiB per device)\n", float64(r.storeBytes)/(1<<20), float64(r.storeBytes)/1024/float64(n))
	}
	return r
}

// enrolScale labels the devices through the API, four at a time.
func enrolScale(client interface {
	Do(method, path string, in, out any) error
}, ids []string) error {
	work := make(chan string)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := client.Do("PUT", "/v1/devices/"+id+"/labels", map[string]string{"fleet": "scale"}, nil); err != nil {
					errs <- fmt.Errorf("enrolling %s: %w", id, err)
					for range work {
					}
					return
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func mibs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " + ")
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// scaleFleet is the simulated devices in child processes.
type scaleFleet struct {
	children []*exec.Cmd
	ins      []io.WriteCloser
	answers  []chan [2]int64 // each child's progress answers
	readers  sync.WaitGroup
	mu       sync.Mutex
	gen      map[string]int64 // device -> the first generation it applied with pods
}

// startScaleFleet runs n devices of the podhub whose data directory is
// data, spread over addrs, in children of scaleShard devices.
func startScaleFleet(addrs []string, data, dir string, n int) (f *scaleFleet, err error) {
	f = &scaleFleet{gen: map[string]int64{}}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	for from := 0; from < n; from += scaleShard {
		spec := strings.Join([]string{strings.Join(addrs, "+"), data, dir, strconv.Itoa(from), strconv.Itoa(min(scaleShard, n-from))}, ",")
		c := exec.Command(os.Args[0], "-scale-child", spec, "-hub-heartbeat", hubHeartbeat.String())
		c.Stderr = os.Stderr
		out, err := c.StdoutPipe()
		if err != nil {
			return nil, err
		}
		in, err := c.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		answers := make(chan [2]int64, 1)
		f.children, f.ins, f.answers = append(f.children, c), append(f.ins, in), append(f.answers, answers)
		f.readers.Add(1)
		go func() { defer f.readers.Done(); f.read(out, answers) }()
	}
	return f, nil
}

// read takes a child's lines: its devices' applied documents and its
// progress answers.
func (f *scaleFleet) read(r io.Reader, answers chan<- [2]int64) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 4<<20)
	for s.Scan() {
		w := strings.Fields(s.Text())
		switch {
		case len(w) == 3 && w[0] == "progress":
			a, _ := strconv.ParseInt(w[1], 10, 64)
			p, _ := strconv.ParseInt(w[2], 10, 64)
			answers <- [2]int64{a, p}
		case len(w) == 3: // DEVICE GENERATION PODS: a document with pods
			gen, _ := strconv.ParseInt(w[1], 10, 64)
			f.mu.Lock()
			if _, ok := f.gen[w[0]]; !ok {
				f.gen[w[0]] = gen
			}
			f.mu.Unlock()
		}
	}
}

func (f *scaleFleet) setRate(total float64) {
	for _, in := range f.ins {
		fmt.Fprintf(in, "rate %g\n", total/float64(len(f.ins)))
	}
}

// progress sums the children's answers: outbox items the hub stored,
// statuses published.
func (f *scaleFleet) progress() (acked, published int64, err error) {
	for _, in := range f.ins {
		if _, err := fmt.Fprintln(in, "progress"); err != nil {
			return 0, 0, fmt.Errorf("asking a device child its progress: %w", err)
		}
	}
	for i, a := range f.answers {
		select {
		case p := <-a:
			acked, published = acked+p[0], published+p[1]
		case <-time.After(time.Minute):
			return 0, 0, fmt.Errorf("device child %d did not tell its progress within 1 min", i)
		}
	}
	return acked, published, nil
}

// waitApplied waits until n devices applied a document with pods.
func (f *scaleFleet) waitApplied(n int, within time.Duration) error {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		f.mu.Lock()
		got := len(f.gen)
		f.mu.Unlock()
		if got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v %d of %d devices applied a document with the DaemonSet's pod", within, got, n)
		}
	}
}

// ackedAt counts the devices whose ack of the document they applied the
// hub's listing shows.
func (f *scaleFleet) ackedAt(ds []fleetdb.Device) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, d := range ds {
		if gen, ok := f.gen[d.ID]; ok && d.ObservedGeneration >= gen {
			n++
		}
	}
	return n
}

func (f *scaleFleet) stop() {
	for _, in := range f.ins {
		in.Close() // the child stops
	}
	for _, c := range f.children {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	f.readers.Wait()
}

// printScale prints the setups side by side and their ratios.
func printScale(rs []scaleResult, n int) {
	fmt.Printf("\nfleet at scale, %d devices\n", n)
	fmt.Printf("%-44s", "")
	for _, r := range rs {
		fmt.Printf(" %17s", r.setup)
	}
	fmt.Println()
	row := func(label string, f func(r scaleResult) string) {
		fmt.Printf("%-44s", label)
		for _, r := range rs {
			fmt.Printf(" %17s", f(r))
		}
		fmt.Println()
	}
	num := func(ok bool, format string, v float64) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	row("podhub processes / broker nodes", func(r scaleResult) string { return fmt.Sprintf("%d / %d", r.hubs, max(r.brokers, 1)) })
	row("devices connected -> all Ready (s)", func(r scaleResult) string {
		if r.ready == 0 && r.readyN > 0 {
			return fmt.Sprintf("%d in %v", r.readyN, *scaleReadyIn)
		}
		return num(r.ready > 0, "%.1f", r.ready.Seconds())
	})
	row("pod statuses stored (/s)", func(r scaleResult) string { return num(r.stored > 0, "%.0f", r.stored) })
	row("  offered (/s)", func(r scaleResult) string { return num(r.offered > 0, "%.0f", r.offered) })
	row("  CPU per status: podhub (µs)", func(r scaleResult) string { return num(r.stored > 0, "%.0f", r.cpuPerStatus[0]) })
	row("  CPU per status: brokers (µs)", func(r scaleResult) string { return num(r.stored > 0 && r.brokers > 0, "%.0f", r.cpuPerStatus[1]) })
	row("  CPU per status: database (µs)", func(r scaleResult) string { return num(r.stored > 0 && r.dbFull > 0, "%.0f", r.cpuPerStatus[2]) })
	row("DaemonSet -> every device applied (s)", func(r scaleResult) string { return num(r.applied > 0, "%.1f", r.applied.Seconds()) })
	row("DaemonSet -> every ack stored (s)", func(r scaleResult) string { return num(r.acked > 0, "%.1f", r.acked.Seconds()) })
	row("podhub RSS, all replicas: connected (MiB)", func(r scaleResult) string { return num(len(r.hubConn) > 0, "%.1f", sum(r.hubConn)) })
	row("  after statuses and apply (MiB)", func(r scaleResult) string { return num(len(r.hubFull) > 0, "%.1f", sum(r.hubFull)) })
	row("broker nodes RSS: connected (MiB)", func(r scaleResult) string { return num(len(r.brkConn) > 0, "%.1f", sum(r.brkConn)) })
	row("  after statuses and apply (MiB)", func(r scaleResult) string { return num(len(r.brkFull) > 0, "%.1f", sum(r.brkFull)) })
	row("database PSS: connected (MiB)", func(r scaleResult) string { return num(r.dbConn > 0, "%.1f", r.dbConn) })
	row("  after statuses and apply (MiB)", func(r scaleResult) string { return num(r.dbFull > 0, "%.1f", r.dbFull) })
	// Per 1,000 devices: what connecting them added, all processes.
	per := func(r scaleResult) float64 {
		return (sum(r.hubConn) + sum(r.brkConn) + r.dbConn - sum(r.hubIdle) - sum(r.brkIdle) - r.dbIdle) * 1000 / float64(connected(r, n))
	}
	row("memory per 1,000 connected devices (MiB)", func(r scaleResult) string { return num(len(r.hubConn) > 0, "%.1f", per(r)) })
	row("  of it podhub (MiB)", func(r scaleResult) string {
		return num(len(r.hubConn) > 0, "%.1f", (sum(r.hubConn)-sum(r.hubIdle))*1000/float64(connected(r, n)))
	})
	row("  of it brokers (MiB)", func(r scaleResult) string {
		return num(len(r.brkConn) > 0, "%.1f", (sum(r.brkConn)-sum(r.brkIdle))*1000/float64(connected(r, n)))
	})
	row("fleet store size per device (KiB)", func(r scaleResult) string {
		return num(r.storeBytes > 0, "%.1f", float64(r.storeBytes)/1024/float64(n))
	})
	by := map[string]scaleResult{}
	for _, r := range rs {
		if r.err == nil {
			by[r.setup] = r
		}
	}
	ratio := func(label, a, b string, f func(scaleResult) float64) {
		ra, oka := by[a]
		rb, okb := by[b]
		if oka && okb && f(rb) != 0 {
			fmt.Printf("  %-54s %6.2fx\n", label, f(ra)/f(rb))
		}
	}
	fmt.Println("ratios")
	for _, p := range [][2]string{{setupPostgres, setupSQLite}, {setupReplicasEmbedded, setupPostgres}, {setupReplicas, setupPostgres}} {
		name := map[string]string{setupPostgres: "PostgreSQL/SQLite",
			setupReplicasEmbedded: fmt.Sprintf("%d replicas/1 (embedded broker)", *scaleReplicas),
			setupReplicas:         fmt.Sprintf("%d replicas on NATS/1 embedded", *scaleReplicas)}[p[0]]
		ratio(name+": Ready time", p[0], p[1], func(r scaleResult) float64 { return r.ready.Seconds() })
		ratio(name+": statuses stored /s", p[0], p[1], func(r scaleResult) float64 { return r.stored })
		ratio(name+": DaemonSet -> acks stored", p[0], p[1], func(r scaleResult) float64 { return r.acked.Seconds() })
		ratio(name+": memory per 1,000 devices", p[0], p[1], per)
	}
}

// connected is how many devices a setup's memory with the fleet
// connected was measured with: all, or those Ready when it timed out.
func connected(r scaleResult, n int) int {
	if r.ready == 0 && r.readyN > 0 {
		return r.readyN
	}
	return n
}
