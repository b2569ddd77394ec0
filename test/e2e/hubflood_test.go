package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// rssKiB reads a process's resident set (VmRSS) in KiB; 0 when gone.
// peakRSS samples processes' resident sets until stop, keeping each
// one's highest.
type peakRSS struct {
	mu   sync.Mutex
	peak map[int]int64
	stop chan struct{}
	done chan struct{}
}

func samplePeaks(pids ...int) *peakRSS {
	p := &peakRSS{peak: map[int]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			p.mu.Lock()
			for _, pid := range pids {
				p.peak[pid] = max(p.peak[pid], rssKiB(pid))
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *peakRSS) end() map[int]int64 {
	close(p.stop)
	<-p.done
	return p.peak
}

// flooder is a client of the hub's broker. The embedded broker lets
// anyone publish; where a broker enforces ACLs, only the hub may publish
// on a device's desired topic, so this is the flood a leaked (or buggy)
// hub identity can send: PODVISOR_FLOOD_USER and PODVISOR_FLOOD_PASSWORD
// give the credentials to use there.
func flooder(t *testing.T, addr string) mqtt.Client {
	opts := mqtt.NewClientOptions().AddBroker("mqtt://" + addr).SetClientID("flooder").SetAutoReconnect(false).
		SetWriteTimeout(30 * time.Second)
	if u := os.Getenv("PODVISOR_FLOOD_USER"); u != "" {
		opts.SetUsername(u).SetPassword(os.Getenv("PODVISOR_FLOOD_PASSWORD"))
	}
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("flooder connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

// Under a flood of 100,000 junk messages on a device's desired topic and
// 100,000 more on its report topics, the daemon stays under 40 MiB
// (resident, sampled every 50 ms), its refusals are logged throttled,
// and it keeps serving: a pod applied after the flood runs and is
// mirrored. The broker here is the open test broker, as if the broker
// itself were compromised: podhub's own broker lets only the hub publish
// desired documents (TestBrokerDeviceACL), and podhub's memory under a
// device's flood is TestBrokerFloodBounded's.
func TestFloodBoundsMemory(t *testing.T) {
	const messages = 100000
	r := newFleetRig(t)
	r.enrol(t, "flood-1")
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: flood-1, key: %s, allowProcessPods: true, allowRootProcessPods: true}\n", r.addr, r.pubFile))
	d.start()
	r.apply(t, "flood-1", processPod("before", "Always", 1, "exec sleep 1004"))
	d.waitPod("before", 20*time.Second, running)

	peaks := samplePeaks(d.cmd.Process.Pid)
	c := flooder(t, r.addr)
	tp := protocol.Topics{}
	targets := []string{tp.Device("flood-1", protocol.KindDesired), tp.Device("flood-1", protocol.KindStatus), tp.Device("flood-1", protocol.KindHeartbeat)}
	junk := fmt.Sprintf(`{"schema":1,"desired":{"schema":1,"device":"flood-1","generation":99,"pods":[]},"signature":"%s"}`, strings.Repeat("A", 88))
	start := time.Now()
	for i := range messages {
		for j, topic := range targets {
			if j > 0 && i%2 == 1 {
				continue // 100,000 on desired, 100,000 across the report topics
			}
			tok := c.Publish(topic, 1, false, junk)
			if i%500 == 0 && !tok.WaitTimeout(30*time.Second) {
				t.Fatalf("flood publish %d not acknowledged", i)
			}
		}
	}
	t.Logf("flood of %d messages published in %v", 2*messages, time.Since(start).Round(time.Millisecond))

	// The device still serves the hub.
	r.apply(t, "flood-1", processPod("after", "Always", 1, "exec sleep 1005"))
	d.waitPod("after", 60*time.Second, running)
	waitForLong(t, 60*time.Second, "the new pod mirrored Running at the hub", func() bool {
		p := r.mirror("flood-1", "default/after")
		return p != nil && running(p)
	})
	dev := peaks.end()[d.cmd.Process.Pid]
	t.Logf("peak RSS under the flood: podvisor %.1f MiB", float64(dev)/1024)
	if dev > 40*1024 {
		t.Errorf("podvisor peaked at %.1f MiB under the flood, over 40 MiB", float64(dev)/1024)
	}
	if n := strings.Count(d.log.String(), "refused a desired document"); n > 20 {
		t.Errorf("the daemon logged %d refusals one by one", n)
	}
}
