package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
	"github.com/podvisor/podvisor/test/simfleet"
)

// A scale child simulates a share of make bench-scale's devices (real
// agents, each with its own SQLite store and certificate), as the
// scheduling bench's children do, and takes commands on its standard
// input, one a line:
//
//	rate R     publish R pod statuses a second over its devices (0: none)
//	progress   answer "progress ACKED PUBLISHED": its devices' outbox
//	           items the hub stored (their receipts), and the statuses
//	           published so far
//
// It prints "applied DEVICE GENERATION POD,POD" for every document a
// device applies, and stops when its standard input closes.

// scalePods is how many pods each simulated device reports: a status
// goes to one of them in turn.
const scalePods = 5

// scaleDrivers is how many goroutines of a child publish statuses.
const scaleDrivers = 8

// scaleID is the i-th simulated device's ID.
func scaleID(i int) string { return fmt.Sprintf("scale-%05d", i) }

// scaleChildMain runs the devices spec names:
// ADDR[+ADDR…],DATADIR,DIR,FROM,COUNT. Device i connects to the
// (i mod the count)-th address: a cluster's nodes share the fleet.
func scaleChildMain(spec string) error {
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		return fmt.Errorf("-scale-child %q: want ADDR[+ADDR…],DATADIR,DIR,FROM,COUNT", spec)
	}
	addrs, data, dir := strings.Split(f[0], "+"), f[1], f[2]
	from, err1 := strconv.Atoi(f[3])
	count, err2 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || count <= 0 {
		return fmt.Errorf("-scale-child %q: FROM and COUNT are numbers", spec)
	}
	var enrolments []simfleet.Enrolment
	for _, a := range addrs {
		e, err := simfleet.LoadEnrolment(data, a)
		if err != nil {
			return err
		}
		enrolments = append(enrolments, e)
	}
	report := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	devs := make([]*scaleDevice, 0, count)
	defer func() {
		close(stop)
		wg.Wait()
		for _, d := range devs {
			d.st.Close()
		}
	}()
	for i := from; i < from+count; i++ {
		id := scaleID(i)
		st, err := store.Open(filepath.Join(dir, "devices", id, "state.db"), store.DefaultLimits)
		if err != nil {
			return err
		}
		d := &scaleDevice{id: id, st: st}
		devs = append(devs, d)
		a, err := enrolments[i%len(enrolments)].Agent(id, st, simDevice{id: id, report: report}, *hubHeartbeat, silent)
		if err != nil {
			return err
		}
		d.agent = a
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(stop) }()
	}
	// Several drivers, each over its share of the devices: one device's
	// publish is a transaction of its store, and one driver alone could
	// not offer the rate.
	var drivers []*statusDriver
	for w := range scaleDrivers {
		drv := &statusDriver{}
		for i := w; i < len(devs); i += scaleDrivers {
			drv.devs = append(drv.devs, devs[i])
		}
		if len(drv.devs) == 0 {
			continue
		}
		drivers = append(drivers, drv)
		wg.Add(1)
		go func() { defer wg.Done(); drv.run(stop) }()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.Fields(in.Text())
		switch {
		case len(cmd) == 2 && cmd[0] == "rate":
			r, err := strconv.ParseFloat(cmd[1], 64)
			if err != nil || r < 0 {
				return fmt.Errorf("scale child: rate %q: want a number of statuses a second", cmd[1])
			}
			for _, drv := range drivers {
				drv.setRate(r / float64(len(drivers)))
			}
		case len(cmd) == 1 && cmd[0] == "progress":
			var acked int64
			for _, d := range devs {
				a, _, err := d.st.Progress()
				if err != nil {
					return fmt.Errorf("scale child: device %s's outbox: %w", d.id, err)
				}
				acked += a
			}
			var published int64
			for _, drv := range drivers {
				published += drv.published()
			}
			report.line(fmt.Sprintf("progress %d %d", acked, published))
		default:
			return fmt.Errorf("scale child: unknown command %q", in.Text())
		}
	}
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// scaleDevice is one simulated device of a child.
type scaleDevice struct {
	id    string
	st    *store.Store
	agent *uplink.Agent
	n     int // statuses published (the driver's alone)
}

// statusDriver publishes pod statuses at a rate, one device after the
// other: an open loop, as real devices report whatever the hub's pace.
// A device's status not yet sent when the next comes is replaced by it
// in its outbox (the newest per pod is sent), so a hub that cannot keep
// up stores fewer than are offered: the stored rate is the hub's.
type statusDriver struct {
	devs []*scaleDevice
	mu   sync.Mutex
	rate float64
	sent int64
}

func (d *statusDriver) setRate(r float64) {
	d.mu.Lock()
	d.rate = r
	d.mu.Unlock()
}

func (d *statusDriver) published() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sent
}

// run publishes, every 10 ms, what the rate owes since the last tick.
func (d *statusDriver) run(stop <-chan struct{}) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	next, owed, last := 0, 0.0, time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			d.mu.Lock()
			rate := d.rate
			d.mu.Unlock()
			owed += rate * now.Sub(last).Seconds()
			last = now
			if rate == 0 {
				owed = 0
			}
			// At most a second's worth at once: a child late behind its
			// rate (the machine busy) does not burst.
			owed = min(owed, max(rate, 1))
			for ; owed >= 1; owed-- {
				dev := d.devs[next]
				next = (next + 1) % len(d.devs)
				if err := dev.agent.Publish([]store.Item{dev.status()}); err != nil {
					fmt.Fprintf(os.Stderr, "scale child: device %s: publishing a status: %v\n", dev.id, err)
					continue
				}
				d.mu.Lock()
				d.sent++
				d.mu.Unlock()
			}
		}
	}
}

// status is the device's next pod status: one of its pods, Running and
// Ready, its restart count moving (the summary the hub keeps stays, as
// for most status changes).
func (s *scaleDevice) status() store.Item {
	s.n++
	name := fmt.Sprintf("app-%d", s.n%scalePods)
	now := metav1.Now()
	p := v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "app"}},
		Spec:       v1.PodSpec{NodeName: s.id, Containers: []v1.Container{{Name: "app", Image: "process:///bin/sleep"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &now,
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: v1.ContainersReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, Image: "process:///bin/sleep", RestartCount: int32(s.n / scalePods),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}}}}}
	b, _ := json.Marshal(&p)
	return store.Item{Key: "default/" + name, Kind: store.KindPod, Payload: b}
}
