package e2e

import (
	"bufio"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// logFollower is a running podhub logs -f, its output collected.
type logFollower struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out strings.Builder
	// arrived is when each distinct line was first read from the
	// follower's output: a delivery's end, free of the test's polling.
	arrived map[string]time.Time
	done    chan struct{}
}

func (h *podhubServer) followLogs(t *testing.T, args ...string) *logFollower {
	t.Helper()
	f := &logFollower{cmd: exec.Command(podhubBinary(), append([]string{"--data-dir", h.dataDir, "logs"}, args...)...),
		arrived: map[string]time.Time{}, done: make(chan struct{})}
	r, w := io.Pipe()
	f.cmd.Stdout, f.cmd.Stderr = w, w
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			at := time.Now()
			f.mu.Lock()
			f.out.WriteString(s.Text() + "\n")
			if _, ok := f.arrived[s.Text()]; !ok {
				f.arrived[s.Text()] = at
			}
			f.mu.Unlock()
		}
	}()
	go func() { f.cmd.Wait(); w.Close(); close(f.done) }()
	t.Cleanup(f.stop)
	return f
}

func (f *logFollower) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}

// lineWith is the first line of the output containing sub and when it
// was read ("" while there is none).
func (f *logFollower) lineWith(sub string) (string, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for line := range strings.Lines(f.out.String()) {
		if line = strings.TrimSuffix(line, "\n"); strings.Contains(line, sub) {
			return line, f.arrived[line]
		}
	}
	return "", time.Time{}
}

// stop ends it as Ctrl-C does, and waits.
func (f *logFollower) stop() {
	f.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		f.cmd.Process.Kill()
		<-f.done
	}
}

func (f *logFollower) exited() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// talkerPod writes "hello N" lines at start, then echoes each trigger
// file's content as "said TOKEN" as soon as it appears.
func talkerPod(name, trigger string) string {
	return processPod(name, "Always", 1, fmt.Sprintf(
		`for i in 1 2 3; do echo "hello $i"; done; while true; do if [ -f %[1]s ]; then echo "said $(cat %[1]s)"; rm -f %[1]s; fi; sleep 0.02; done`, trigger))
}

// logsScenario is what every broker must carry: a pod's log through
// podhub logs (tail, timestamps), a line followed within a second, the
// refusals in Kubernetes' words, and an offline device told apart.
func logsScenario(t *testing.T, h *podhubServer, d *daemon, device string) {
	trigger := filepath.Join(t.TempDir(), "say")
	manifest := filepath.Join(t.TempDir(), "talker.yaml")
	os.WriteFile(manifest, []byte(talkerPod("talker", trigger)), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", device); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("talker", 20*time.Second, running)

	waitForLong(t, 10*time.Second, "podhub logs talker showing its first lines", func() bool {
		out, code := h.cli("logs", "talker", "--device", device)
		return code == 0 && strings.HasPrefix(out, "hello 1\nhello 2\nhello 3\n")
	})
	out, code := h.cli("logs", "talker", "--device", device, "--tail", "1", "--timestamps")
	if f := strings.Fields(out); code != 0 || len(f) != 3 || f[1] != "hello" || f[2] != "3" || !strings.Contains(f[0], "T") {
		t.Fatalf("logs --tail 1 --timestamps: %d %q", code, out)
	}

	// A line the pod writes reaches podhub logs -f within a second (the
	// median of three lines; each must arrive, one late line on a loaded
	// machine is not the pipeline's latency): counted from the line's own
	// time (--timestamps: the shim stamps a record as it writes it to the
	// log) to when the follower's output was read, so neither the pod's
	// polling of its trigger file nor the test's polling of the output is
	// in it (both clocks are the host's).
	f := h.followLogs(t, "talker", "--device", device, "-f", "--timestamps")
	waitForLong(t, 10*time.Second, "podhub logs -f showing the first lines", func() bool { return strings.Contains(f.text(), "hello 3") })
	var tooks []time.Duration
	for i := range 3 {
		token := fmt.Sprintf("tok-%d-%d", i, time.Now().UnixNano())
		start := time.Now()
		// Whole: the pod, polling, must never see the file created but
		// not yet written (it would echo nothing and remove it, and the
		// token would be lost).
		writeWhole(t, trigger, token)
		var line string
		var read time.Time
		waitForLong(t, 10*time.Second, "podhub logs -f showing "+token, func() bool { line, read = f.lineWith("said " + token); return line != "" })
		fields := strings.Fields(line)
		stamp, err := time.Parse(time.RFC3339Nano, fields[0])
		if err != nil || len(fields) != 3 || fields[2] != token {
			t.Fatalf("a followed line with --timestamps: %q, want \"<RFC 3339 time> said %s\"", line, token)
		}
		took := read.Sub(stamp)
		t.Logf("%s: a line in the pod's log read from podhub logs -f %s after its time stamp (%s after the trigger was written)",
			device, took.Round(time.Millisecond), read.Sub(start).Round(time.Millisecond))
		if took < 0 {
			t.Errorf("a line stamped %s in the pod's log was read from podhub logs -f at %s, before it was written",
				stamp.Format(time.RFC3339Nano), read.Format(time.RFC3339Nano))
		}
		tooks = append(tooks, took)
	}
	f.stop()
	slices.Sort(tooks)
	if median := tooks[len(tooks)/2]; median > time.Second {
		t.Errorf("lines in the pod's log were read from podhub logs -f %v after their time stamps (median %v): want within 1 s", tooks, median)
	}

	// Refusals in Kubernetes' words.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "ghost", "--device", device}, `pods "ghost" not found`},
		{[]string{"logs", "talker", "--device", "nowhere"}, `nodes "nowhere" not found`},
		{[]string{"logs", "talker", "--device", device, "-c", "other"}, "container other is not valid for pod talker"},
		{[]string{"logs", "talker", "--device", device, "--previous"}, `previous terminated container "main" in pod "talker" not found`},
		{[]string{"logs", "talker", "--device", device, "-n", "kube-system"}, `pods "talker" not found`},
	} {
		out, code := h.cli(c.args...)
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("podhub %s: %d %q, want %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}

	// The device stops: offline, told at once.
	d.stop(syscall.SIGTERM)
	waitForLong(t, 20*time.Second, device+" offline at the hub", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, device) == "NotReady"
	})
	start := time.Now()
	out, code = h.cli("logs", "talker", "--device", device)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("device %q is offline (last seen ", device)) || time.Since(start) > 3*time.Second {
		t.Fatalf("logs of an offline device: %d %q after %s", code, out, time.Since(start))
	}
}

// podhub logs through the embedded broker, and a flood of requests:
// forged (another key, unsigned, another device's topic), replayed, over
// the stream bound; the device keeps at most 4 streams and its memory.
// A device that stops answering while the hub still counts it Ready is a
// timeout.
func TestPodhubLogsEmbeddedBroker(t *testing.T) {
	h := newPodhub(t)
	evilDir, _ := h.enrol(t, "gw-evil")
	_, cfg := h.enrol(t, "gw-logs")
	d := newDaemon(t)
	d.withConfig(cfg + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-logs Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-logs") == "Ready"
	})
	floodLogs(t, h, d, evilDir)
	chattyLogs(t, h, d)

	// A device that does not answer (stopped, still Ready at the hub).
	d.cmd.Process.Signal(syscall.SIGSTOP)
	start := time.Now()
	out, code := h.cli("logs", "talker", "--device", "gw-logs")
	d.cmd.Process.Signal(syscall.SIGCONT)
	if took := time.Since(start); code != 1 || !strings.Contains(out, `Timeout: device "gw-logs" did not answer within 10s`) || took > 15*time.Second {
		t.Fatalf("logs of a device that does not answer: %d %q after %s", code, out, took)
	}
	logsScenario(t, h, d, "gw-logs")
}

// floodLogs runs the talker and throws requests at gw-logs.
func floodLogs(t *testing.T, h *podhubServer, d *daemon, evilDir string) {
	manifest := filepath.Join(t.TempDir(), "talker.yaml")
	os.WriteFile(manifest, []byte(talkerPod("talker", filepath.Join(t.TempDir(), "say"))), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-logs"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("talker", 20*time.Second, running)
	reqTopic := protocol.Topics{}.Device("gw-logs", protocol.KindLogsRequest)
	framesTopic := protocol.Topics{}.Device("gw-logs", protocol.KindLogs)

	// The bound: four followers stream, the rest are refused at once.
	var followers []*logFollower
	for range 4 {
		f := h.followLogs(t, "talker", "--device", "gw-logs", "-f")
		followers = append(followers, f)
		waitForLong(t, 10*time.Second, "a follower streaming", func() bool { return strings.Contains(f.text(), "hello 3") })
	}
	rss0 := rssKiB(d.cmd.Process.Pid)
	for range 6 {
		out, code := h.cli("logs", "talker", "--device", "gw-logs")
		if code != 1 || !strings.Contains(out, "too many log streams") {
			t.Fatalf("a fifth stream: %d %q", code, out)
		}
	}

	// Replays of the requests the hub sent, and forgeries.
	c, _, err := dial(t, "mqtts://"+h.addr, h.hubCredentials().tls(t), "podhub")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var captured [][]byte
	frames := map[string]int{} // by request ID
	c.Subscribe(protocol.Topics{}.Device("gw-logs", "+"), 1, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		defer mu.Unlock()
		switch m.Topic() {
		case reqTopic:
			captured = append(captured, append([]byte(nil), m.Payload()...))
		case framesTopic:
			if fr, _, err := protocol.DecodeLogsFrame(m.Payload()); err == nil {
				frames[fr.Request]++
			}
		}
	}).Wait()
	// One more refused request, to have an open to replay (keep-alives
	// of the followers come every 10 s).
	h.cli("logs", "talker", "--device", "gw-logs")
	waitForLong(t, 15*time.Second, "requests captured", func() bool { mu.Lock(); defer mu.Unlock(); return len(captured) >= 1 })
	_, forger, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	for i := range 300 {
		r := protocol.LogsRequest{Device: "gw-logs", ID: fmt.Sprintf("%032x", i+1), Op: protocol.LogsOpen, Sent: now, Expires: now.Add(time.Minute),
			Namespace: "default", Pod: "talker", Options: &protocol.LogsOptions{Follow: true}}
		forged, err := protocol.SignLogsRequest(r, forger)
		if err != nil {
			t.Fatal(err)
		}
		c.Publish(reqTopic, 1, false, forged)
		c.Publish(reqTopic, 1, false, []byte(`{"schema":1,"doc":{"device":"gw-logs"}}`))
		mu.Lock()
		replay := captured[i%len(captured)]
		mu.Unlock()
		c.Publish(reqTopic, 1, false, replay).Wait()
	}
	// Another device cannot reach gw-logs's requests topic at all.
	evil, _, err := dial(t, "mqtts://"+h.addr, bundle(evilDir).tls(t), "gw-evil")
	if err == nil {
		mu.Lock()
		evil.Publish(reqTopic, 1, false, captured[0]).WaitTimeout(2 * time.Second)
		mu.Unlock()
	}
	waitForLong(t, 10*time.Second, "gw-logs refusing the forged and replayed requests", func() bool {
		return strings.Contains(d.log.String(), "refused a logs request") && strings.Contains(d.log.String(), "refused more logs requests") ||
			strings.Count(d.log.String(), "refused a logs request") >= 5
	})
	// One more request through the hub, after the flood at the broker:
	// the device handles its requests in order, so once this one is
	// refused, every forged and replayed one has been handled too.
	if out, code := h.cli("logs", "talker", "--device", "gw-logs"); code != 1 || !strings.Contains(out, "too many log streams") {
		t.Fatalf("a request after the flood: %d %q", code, out)
	}
	// The followers' pod is quiet: every frame seen since is a refusal,
	// one per request the hub made; a replay answered would be a second.
	mu.Lock()
	for id, n := range frames {
		if n > 1 {
			t.Errorf("request %s answered %d times: a replay was taken", id, n)
		}
	}
	for i := range 300 {
		if n := frames[fmt.Sprintf("%032x", i+1)]; n > 0 {
			t.Errorf("a forged request was answered %d times", n)
		}
	}
	mu.Unlock()
	for _, f := range followers {
		if f.exited() {
			t.Errorf("a follower ended during the flood: %q", f.text())
		}
	}
	rss1 := rssKiB(d.cmd.Process.Pid)
	t.Logf("gw-logs RSS with 4 streams: %d KiB before the flood, %d KiB after 900 forged or replayed requests and 7 over the bound", rss0, rss1)
	if rss1 > rss0+8<<10 {
		t.Errorf("the daemon grew by %d KiB under the flood", rss1-rss0)
	}
	// The followers go (their streams are cancelled): a new one is served.
	for _, f := range followers {
		f.stop()
	}
	waitForLong(t, 15*time.Second, "a stream served again once the followers went", func() bool {
		out, code := h.cli("logs", "talker", "--device", "gw-logs", "--tail", "1")
		return code == 0 && strings.Contains(out, "hello 3")
	})
	h.cli("delete", "pod", "talker", "--device", "gw-logs")
	d.waitGone("talker", 30*time.Second)
}

// chattyLogs follows a pod that writes as fast as a shell can: the
// device sends at most 10 frames a second and 64 KiB/s, and stays
// connected (its broker disconnects a client past 100 messages a second).
func chattyLogs(t *testing.T, h *podhubServer, d *daemon) {
	manifest := filepath.Join(t.TempDir(), "chatty.yaml")
	os.WriteFile(manifest, []byte(processPod("chatty", "Always", 1, `while :; do seq 1 200; sleep 0.005; done`)), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-logs"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("chatty", 20*time.Second, running)
	c, _, err := dial(t, "mqtts://"+h.addr, h.hubCredentials().tls(t), "podhub")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	frames, bytes := map[string]int{}, map[string]int{}
	c.Subscribe(protocol.Topics{}.Device("gw-logs", protocol.KindLogs), 1, func(_ mqtt.Client, m mqtt.Message) {
		if fr, data, err := protocol.DecodeLogsFrame(m.Payload()); err == nil {
			mu.Lock()
			frames[fr.Request]++
			bytes[fr.Request] += len(data)
			mu.Unlock()
		}
	}).Wait()
	f := h.followLogs(t, "chatty", "--device", "gw-logs", "-f", "--tail", "0")
	const window = 3 * time.Second
	time.Sleep(window) // the stream runs for this long, then is measured
	mu.Lock()
	for id, n := range frames {
		t.Logf("chatty stream %s: %d frames, %d bytes in %s", id, n, bytes[id], window)
		if n > int(window/(100*time.Millisecond))+2 || bytes[id] > 64<<10*(int(window/time.Second)+2) {
			t.Errorf("stream %s: %d frames and %d bytes in %s: over 10 frames or 64 KiB a second", id, n, bytes[id], window)
		}
	}
	if len(frames) != 1 {
		t.Errorf("%d streams seen, want the one followed", len(frames))
	}
	mu.Unlock()
	if f.exited() || strings.Contains(d.log.String(), "hub connection lost") {
		t.Fatalf("the follower ended or the device lost its connection: %q", f.text())
	}
	f.stop()
	h.cli("delete", "pod", "chatty", "--device", "gw-logs")
	d.waitGone("chatty", 30*time.Second)
}

// podhub logs through Debian's Mosquitto with the packaged ACL.
func TestPodhubLogsMosquitto(t *testing.T) {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub")}
	if out, code := h.cli("init"); code != 0 {
		t.Fatalf("init: %s", out)
	}
	pki := filepath.Join(h.dataDir, "pki")
	addr, _ := startMosquitto(t, pki, nil)
	h.addr = addr
	_, cfg := h.enrol(t, "gw-mq")
	os.WriteFile(filepath.Join(h.dataDir, "podhub.yaml"), []byte(fmt.Sprintf("broker: mqtts://%s\ntls: {ca: %s}\n",
		addr, filepath.Join(pki, "ca.pem"))), 0o600)
	h.cmd = exec.Command(podhubBinary(), "--data-dir", h.dataDir, "serve")
	h.startCmd()
	t.Cleanup(h.stop)
	d := newDaemon(t)
	d.withConfig(cfg + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-mq Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-mq") == "Ready"
	})
	logsScenario(t, h, d, "gw-mq")
}
