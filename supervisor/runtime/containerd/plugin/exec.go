package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// maxExecOutput bounds what a probe or hook may print into a reply (the
// kubelet keeps 10 KiB of a probe's output too).
const maxExecOutput = 10 << 10

// Exec runs a command in a running container, as the container's process
// runs (user, env, cwd), and returns its exit code and output. A command
// still running at the timeout is killed.
func (p *Plugin) Exec(args pluginapi.ExecArgs, reply *pluginapi.ExecReply) error {
	ctx := p.ctx()
	out := &boundedBuffer{max: maxExecOutput}
	code, timedOut, err := p.exec(ctx, args.ID, args.Command, args.Timeout, cio.NewCreator(cio.WithStreams(nil, out, out)), nil)
	if err != nil {
		return err
	}
	reply.ExitCode, reply.TimedOut, reply.Output = code, timedOut, out.String()
	return nil
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct{ Width, Height uint32 }

// ExecInteractive runs a command in a container attached to this
// process's stdio (podvisor exec), with a terminal of the given size if
// tty is set.
func (p *Plugin) ExecInteractive(id string, command []string, stdin io.Reader, stdout, stderr io.Writer, tty *TerminalSize) (int, error) {
	opts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr)}
	if tty != nil {
		opts = append(opts, cio.WithTerminal)
	}
	code, _, err := p.exec(p.ctx(), id, command, 0, cio.NewCreator(opts...), tty)
	return code, err
}

func (p *Plugin) exec(ctx context.Context, id string, command []string, timeout time.Duration, ioc cio.Creator, tty *TerminalSize) (int, bool, error) {
	c, err := p.client.LoadContainer(ctx, id)
	if err != nil {
		return 0, false, err
	}
	// The record LoadContainer read has the spec and labels: a hook or
	// probe waits for no further round trip to containerd for them.
	info, err := c.Info(ctx, ctrd.WithoutRefreshedMetadata)
	if err != nil {
		return 0, false, err
	}
	var spec oci.Spec
	if info.Spec == nil {
		return 0, false, fmt.Errorf("container %s has no spec", id)
	}
	if err := json.Unmarshal(info.Spec.GetValue(), &spec); err != nil {
		return 0, false, fmt.Errorf("container %s's spec: %w", id, err)
	}
	if spec.Process == nil {
		return 0, false, fmt.Errorf("container %s's spec has no process", id)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	pspec := *spec.Process
	pspec.Args = command
	// The spec lacks a Secret's variables (secretEnvOpt): an exec gets
	// the container's whole environment, as the CRI gives it the spec's.
	if f := info.Labels[pluginapi.LabelEnvFile]; f != "" {
		if pspec.Env, err = readEnvFile(f); err != nil {
			return 0, false, fmt.Errorf("the container's environment: %w", err)
		}
	}
	pspec.Terminal = tty != nil
	proc, err := task.Exec(ctx, execID(), &pspec, ioc)
	if err != nil {
		return 0, false, err
	}
	defer proc.Delete(context.WithoutCancel(ctx), ctrd.WithProcessKill)
	statusC, err := proc.Wait(ctx)
	if err != nil {
		return 0, false, err
	}
	if err := proc.Start(ctx); err != nil {
		return 0, false, err
	}
	if tty != nil && tty.Width > 0 {
		proc.Resize(ctx, tty.Width, tty.Height)
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case st := <-statusC:
		proc.IO().Wait()
		return int(st.ExitCode()), false, st.Error()
	case <-deadline:
		proc.Kill(ctx, syscall.SIGKILL)
		<-statusC
		return -1, true, nil
	}
}

func execID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "exec-" + hex.EncodeToString(b)
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
