package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// probeCost measures the daemon's CPU while count pods are probed every
// second, for one probe handler at a time. Exec probes are processes the
// daemon starts; their CPU shows separately as reaped children's time.
func (b *bench) probeCost(count int, window time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	port := ln.Addr().(*net.TCPAddr).Port
	handlers := []struct{ name, yaml string }{
		{"tcpSocket", fmt.Sprintf("{tcpSocket: {port: %d}, periodSeconds: 1}", port)},
		{"httpGet", fmt.Sprintf("{httpGet: {path: /, port: %d}, periodSeconds: 1}", port)},
		{"exec (true)", `{exec: {command: ["true"]}, periodSeconds: 1}`},
	}
	fmt.Printf("\nprobe cost: %d pods, one readiness probe each every second, daemon CPU over %v\n", count, window)
	fmt.Printf("%-14s %18s %22s\n", "handler", "daemon (% of core)", "+ probe processes")
	var socketCost float64
	for _, h := range handlers {
		for i := 0; i < count; i++ {
			name := fmt.Sprintf("probed-%d", i)
			b.write(name, manifest(name, "exec sleep 100000")+"    readinessProbe: "+h.yaml+"\n")
		}
		if err := b.waitReady(count); err != nil {
			return fmt.Errorf("%s: %w", h.name, err)
		}
		time.Sleep(3 * time.Second) // past the start-up burst
		self0, kids0 := cpuTicks(b.cmd.Process.Pid)
		time.Sleep(window)
		self1, kids1 := cpuTicks(b.cmd.Process.Pid)
		secs := window.Seconds() * clockTicks
		self, kids := float64(self1-self0)/secs*100, float64(kids1-kids0)/secs*100
		fmt.Printf("%-14s %17.2f%% %21.2f%%\n", h.name, self, self+kids)
		if h.name == "tcpSocket" {
			socketCost = self
		} else if socketCost > 0 {
			fmt.Printf("%-14s %17.1fx %21s\n", "  vs tcpSocket", (self+kids)/max(socketCost, 0.01), "")
		}
	}
	return nil
}

// waitReady waits until count probed pods report Ready.
func (b *bench) waitReady(count int) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		list, err := b.client.Pods(b.ctx())
		if err != nil {
			return err
		}
		ready, leaving := 0, 0
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				leaving++ // the previous handler's pods are still stopping
				continue
			}
			if !strings.HasPrefix(p.Name, "probed-") {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" {
					ready++
				}
			}
		}
		if ready == count && leaving == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not all %d pods became ready", count)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times.
const clockTicks = 100

// cpuTicks returns a process's own CPU ticks and those of its reaped
// children.
func cpuTicks(pid int) (self, children uint64) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(data)[strings.LastIndexByte(string(data), ')')+1:])
	n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
	// Fields after the command: utime 14, stime 15, cutime 16, cstime 17
	// (1-based in proc(5)); index from the state field at 3.
	return n(11) + n(12), n(13) + n(14)
}
