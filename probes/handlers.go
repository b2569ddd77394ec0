// Package probes runs Kubernetes probe and lifecycle-hook handlers (exec,
// httpGet, tcpSocket, grpc, sleep) against containers, and schedules
// startup, liveness and readiness probes with their thresholds.
package probes

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/hostcmd"
)

// Target is the container a handler acts on.
type Target struct {
	// Host is the default host for network handlers: process pods share
	// the host's network, so loopback reaches them.
	Host string
	// Ports names the container's ports, for handlers that use a name.
	Ports []v1.ContainerPort
	// Exec context: the container's environment, directory and user.
	Env []string
	Dir string
	UID *uint32
	GID *uint32
	// DialIn dials from inside the pod's network namespace, for pods
	// with a network of their own: network handlers then reach Host
	// there. nil dials from the host's network.
	DialIn func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error)
	// ExecIn runs a command inside the container (containerd pods);
	// nil runs it on the host with the exec context above.
	ExecIn func(ctx context.Context, command []string, timeout time.Duration) (exitCode int, output string, err error)
	// MountNS opens the mount namespace a host command runs in (a
	// process container's own, where its volumes are); nil, or a nil
	// file: the host's.
	MountNS func() (*os.File, error)
}

// ErrUnknown marks a command the runtime could not run (unreachable, the
// container stopping, the command not started): for a probe, the
// kubelet's probe.Unknown, whose result its probe worker throws away.
var ErrUnknown = errors.New("the runtime could not run the command")

// maxOutput bounds how much of a failing exec handler's output is kept.
const maxOutput = 10 << 10

// Exec runs a command in the container's context. It succeeds on exit code
// 0. On timeout the whole process group is killed and reaped: no zombie and
// no straggler outlives the timeout.
func Exec(ctx context.Context, t Target, command []string, timeout time.Duration) error {
	if len(command) == 0 {
		return errors.New("exec: no command")
	}
	if t.ExecIn != nil {
		code, out, err := t.ExecIn(ctx, command, timeout)
		if err != nil {
			return fmt.Errorf("command %q: %w", command[0], err)
		}
		if code != 0 {
			return fmt.Errorf("command %q: exit status %d: %s", command[0], code, bytes.TrimSpace([]byte(out)))
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ns *os.File
	if t.MountNS != nil {
		var err error
		if ns, err = t.MountNS(); err != nil {
			return fmt.Errorf("command %q: %w", command[0], err)
		}
	}
	var cmd *exec.Cmd
	var out limitedBuffer
	start := func() error {
		path, err := hostcmd.LookPath(command[0], t.Env)
		if err != nil {
			return err
		}
		cmd = exec.CommandContext(ctx, path, command[1:]...)
		cmd.Env, cmd.Dir = t.Env, t.Dir
		if cmd.Dir == "" {
			cmd.Dir = "/"
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.SysProcAttr.Credential = hostcmd.Credential(t.UID, t.GID)
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd.Start()
	}
	var err error
	if ns != nil {
		err = hostcmd.InMountNS(ns, start)
		ns.Close()
	} else {
		err = start()
	}
	if cmd == nil {
		return err // not found
	}
	if err == nil {
		err = cmd.Wait()
	}
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers of a finished command
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("command %q timed out after %v", command[0], timeout)
	case err != nil:
		return fmt.Errorf("command %q: %v: %s", command[0], err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// resolvePort turns a port number or a container port name into a number.
func resolvePort(p intstr.IntOrString, ports []v1.ContainerPort) (int, error) {
	if p.Type == intstr.Int {
		return int(p.IntVal), nil
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

// dialer opens probe connections with a short linger so that thousands of
// probes do not pile up sockets in TIME-WAIT (kubernetes#89898).
func dialer(timeout time.Duration) *net.Dialer {
	// KeepAlive -1: a probe connection lives for microseconds, and the
	// keep-alive setup costs four system calls per probe.
	return &net.Dialer{Timeout: timeout, KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// dialInKey carries a pod's Target.DialIn to the shared dialers.
type dialInKey struct{}

type dialInFunc = func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error)

func withDialIn(ctx context.Context, dialIn dialInFunc) context.Context {
	if dialIn == nil {
		return ctx
	}
	return context.WithValue(ctx, dialInKey{}, dialIn)
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialFuncs are the dial functions by timeout, at most maxDialFuncs of
// them: a probe every few seconds per pod need not build a dialer each
// time, and manifests choose the timeouts.
var dialFuncs struct {
	sync.Mutex
	byTimeout map[time.Duration]dialFunc
}

const maxDialFuncs = 32

// dialContext dials from the network namespace the context names, if any.
func dialContext(timeout time.Duration) dialFunc {
	dialFuncs.Lock()
	defer dialFuncs.Unlock()
	if f, ok := dialFuncs.byTimeout[timeout]; ok {
		return f
	}
	d := dialer(timeout)
	f := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dialIn, _ := ctx.Value(dialInKey{}).(dialInFunc); dialIn != nil {
			return dialIn(ctx, d, network, addr)
		}
		return d.DialContext(ctx, network, addr)
	}
	if dialFuncs.byTimeout == nil {
		dialFuncs.byTimeout = map[time.Duration]dialFunc{}
	}
	if len(dialFuncs.byTimeout) < maxDialFuncs {
		dialFuncs.byTimeout[timeout] = f
	}
	return f
}

// address is host:port for a handler: its own host or the target's, its
// port by number or by the container port's name.
func (t Target) address(host string, port intstr.IntOrString) (string, error) {
	n, err := resolvePort(port, t.Ports)
	if err != nil {
		return "", err
	}
	if host == "" {
		host = t.Host
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// TCP succeeds when a connection to the port opens.
func TCP(ctx context.Context, t Target, a *v1.TCPSocketAction, timeout time.Duration) error {
	addr, err := t.address(a.Host, a.Port)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialContext(timeout)(withDialIn(ctx, t.DialIn), "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// transports are shared by every probe with the same timeout: each makes
// one connection per request (no keep-alive, as the kubelet's probes), so
// sharing is safe and saves building a transport for every probe.
var transports sync.Map // time.Duration -> *http.Transport

// httpTransport does not verify certificates (nor does the kubelet).
func httpTransport(timeout time.Duration) *http.Transport {
	if t, ok := transports.Load(timeout); ok {
		return t.(*http.Transport)
	}
	t, _ := transports.LoadOrStore(timeout, &http.Transport{
		DialContext:       dialContext(timeout),
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes never verify, like the kubelet
	})
	return t.(*http.Transport)
}

// maxRedirects is how many same-host redirects an httpGet handler follows,
// as Go's (and so the kubelet's) HTTP client.
const maxRedirects = 10

// errStoppedRedirects is the kubelet's error after too many redirects.
var errStoppedRedirects = errors.New("stopped after 10 redirects")

// sameHostRedirects is the kubelet's redirect policy for probes
// (probe/http.RedirectChecker(false)): a redirect is followed only to the
// host of the first request (any port); a redirect elsewhere is never
// followed and its response is the result, so a container cannot make the
// daemon connect to another host.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return errStoppedRedirects
	}
	return nil
}

// HTTPGet succeeds on a status from 200 to 399.
func HTTPGet(ctx context.Context, t Target, a *v1.HTTPGetAction, timeout time.Duration) error {
	_, err := httpGet(ctx, t, a, timeout)
	return err
}

// httpGetRequest builds an httpGet handler's request, as the kubelet's
// NewRequestForHTTPGetAction: the action's scheme, host (or the target's),
// port, path and headers.
func httpGetRequest(ctx context.Context, t Target, a *v1.HTTPGetAction, userAgent string) (*http.Request, error) {
	addr, err := t.address(a.Host, a.Port)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if a.Scheme == v1.URISchemeHTTPS {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: addr}
	if ref, err := url.Parse(a.Path); err == nil {
		u = u.ResolveReference(ref)
	}
	req, err := http.NewRequestWithContext(withDialIn(ctx, t.DialIn), http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "*/*")
	for _, h := range a.HTTPHeaders {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	return req, nil
}

// httpGet runs an httpGet probe. A redirect to another host ends it with
// success and a warning, as the kubelet's prober.
func httpGet(ctx context.Context, t Target, a *v1.HTTPGetAction, timeout time.Duration) (warning string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := httpGetRequest(ctx, t, a, "podvisor-probe")
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: httpTransport(timeout), Timeout: timeout, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	switch {
	case resp.StatusCode < 200 || resp.StatusCode >= 400:
		return "", fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	case resp.StatusCode >= 300:
		// Only a redirect to another host is left unfollowed.
		return fmt.Sprintf("Probe terminated redirects, Response body: %s", body), nil
	}
	return "", nil
}

// hookHTTPGet runs an httpGet lifecycle hook as the kubelet's handler
// runner (runHTTPHandler) does: any response is success, whatever its
// status (only a request that fails fails the hook); redirects and
// certificates as for probes; and an https hook that a plain HTTP server
// answers is sent again over http.
func hookHTTPGet(ctx context.Context, t Target, a *v1.HTTPGetAction, timeout time.Duration) (warning string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := httpGetRequest(ctx, t, a, "podvisor-lifecycle")
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: httpTransport(timeout), CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	drain(resp)
	if err != nil && req.URL.Scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		req = req.Clone(req.Context()) // keeps the pod's network namespace
		req.URL.Scheme = "http"
		req.Header.Del("Authorization")
		resp, err = client.Do(req)
		drain(resp)
		if err == nil {
			// The kubelet's LifecycleHTTPFallback event text.
			warning = fmt.Sprintf("request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", req.URL.Host)
		}
	}
	return warning, err
}

// drain reads a little of a response and closes it.
func drain(resp *http.Response) {
	if resp != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxOutput))
		resp.Body.Close()
	}
}

// GRPC calls grpc.health.v1.Health/Check over plaintext HTTP/2 and succeeds
// when the service reports SERVING. The two tiny protobuf messages are
// encoded by hand: a gRPC client library would add megabytes to the binary
// for one call.
func GRPC(ctx context.Context, t Target, a *v1.GRPCAction, timeout time.Duration) error {
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	// HealthCheckRequest{service = 1}.
	var msg []byte
	if service != "" {
		msg = append([]byte{0x0a}, binary.AppendUvarint(nil, uint64(len(service)))...)
		msg = append(msg, service...)
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(t.Host, strconv.Itoa(int(a.Port)))
	conn, err := dialContext(timeout)(withDialIn(ctx, t.DialIn), "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	body, code, m, err := grpcCall(ctx, conn, addr, "/grpc.health.v1.Health/Check", frame)
	if err != nil {
		return err
	}
	if code != "0" {
		return fmt.Errorf("rpc error: code = %s desc = %s", code, m)
	}
	if len(body) < 5 {
		return errors.New("gRPC health response too short")
	}
	// HealthCheckResponse{status = 1 (enum)}; SERVING is 1.
	status := uint64(0)
	payload := body[5:]
	for len(payload) > 0 {
		tag, n := binary.Uvarint(payload)
		if n <= 0 {
			return errors.New("malformed gRPC health response")
		}
		payload = payload[n:]
		if tag&7 != 0 { // only varint fields appear in this message
			return errors.New("unexpected field in gRPC health response")
		}
		v, n := binary.Uvarint(payload)
		if n <= 0 {
			return errors.New("malformed gRPC health response")
		}
		payload = payload[n:]
		if tag>>3 == 1 {
			status = v
		}
	}
	if status != 1 {
		return fmt.Errorf("service unhealthy (responded with %q)", servingStatus(status))
	}
	return nil
}

func servingStatus(s uint64) string {
	switch s {
	case 0:
		return "UNKNOWN"
	case 2:
		return "NOT_SERVING"
	case 3:
		return "SERVICE_UNKNOWN"
	}
	return strconv.FormatUint(s, 10)
}

// Probe runs one probe handler.
func Probe(ctx context.Context, t Target, h v1.ProbeHandler, timeout time.Duration) error {
	_, err := probe(ctx, t, h, timeout)
	return err
}

// probe runs one probe handler; a warning comes with a success the
// kubelet reports as a ProbeWarning event.
func probe(ctx context.Context, t Target, h v1.ProbeHandler, timeout time.Duration) (warning string, err error) {
	switch {
	case h.Exec != nil:
		return "", Exec(ctx, t, h.Exec.Command, timeout)
	case h.HTTPGet != nil:
		return httpGet(ctx, t, h.HTTPGet, timeout)
	case h.TCPSocket != nil:
		return "", TCP(ctx, t, h.TCPSocket, timeout)
	case h.GRPC != nil:
		return "", GRPC(ctx, t, h.GRPC, timeout)
	}
	return "", errors.New("probe has no handler")
}

// Hook runs a lifecycle hook handler within timeout. A warning beside a
// nil error is the text of the kubelet's LifecycleHTTPFallback event: an
// https hook answered in plain HTTP succeeded over http.
func Hook(ctx context.Context, t Target, h *v1.LifecycleHandler, timeout time.Duration) (warning string, err error) {
	switch {
	case h.Exec != nil:
		return "", Exec(ctx, t, h.Exec.Command, timeout)
	case h.HTTPGet != nil:
		return hookHTTPGet(ctx, t, h.HTTPGet, timeout)
	case h.Sleep != nil:
		d := min(time.Duration(h.Sleep.Seconds)*time.Second, timeout)
		select {
		case <-time.After(d):
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return "", errors.New("hook has no handler")
}
