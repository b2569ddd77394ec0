package containerd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// ErrNotRunning is returned while the plugin is down (between a crash
// and its restart). It is a runtime.ErrUnreachable: what failed is tried
// again once the plugin is back.
var ErrNotRunning error = notRunning{}

type notRunning struct{}

func (notRunning) Error() string        { return "the containerd runtime plugin is not running" }
func (notRunning) Is(target error) bool { return target == runtime.ErrUnreachable }

// Client runs the plugin and calls it. It restarts a plugin that dies and
// resumes every wait, so a running container is never reported gone
// because its plugin was.
type Client struct {
	// Command starts the plugin; it serves on its stdin and stdout.
	Command []string
	Log     *slog.Logger
	// OnVersion, if set, hears the version of each containerd reached.
	OnVersion func(version string)

	exits chan runtime.Exit

	mu        sync.Mutex
	rpc       *rpcClient
	up        chan struct{}     // closed while a plugin is connected
	waiting   map[string]string // containerd ID → instance ID, being waited on
	stopped   bool
	done      chan struct{}
	connected chan struct{}
}

// NewClient returns a client for the plugin that command starts; Start
// runs it.
func NewClient(command []string, log *slog.Logger) *Client {
	return &Client{Command: command, Log: log, exits: make(chan runtime.Exit, 256),
		up: make(chan struct{}), waiting: map[string]string{}, done: make(chan struct{}),
		connected: make(chan struct{}, 1)}
}

// Exits delivers the end of every watched container.
func (c *Client) Exits() <-chan runtime.Exit { return c.exits }

// Start runs the plugin and keeps it running until Close, restarting it
// with backoff whenever it dies or cannot reach containerd. It waits up to
// wait for the first connection and reports whether it was made.
func (c *Client) Start(wait time.Duration) bool {
	go c.run()
	select {
	case <-c.ready():
		return true
	case <-time.After(wait):
		return false
	}
}

// Connected signals each (re)connection: the daemon then reconciles what
// containerd runs with its records.
func (c *Client) Connected() <-chan struct{} { return c.connected }

func (c *Client) run() {
	defer close(c.done)
	delay := 100 * time.Millisecond
	for !c.isStopped() {
		cmd, client, err := c.launch()
		if err != nil {
			c.Log.Error("containerd runtime plugin", "err", err, "retry in", delay)
			time.Sleep(delay)
			delay = min(delay*2, 10*time.Second)
			continue
		}
		delay = 100 * time.Millisecond
		select {
		case c.connected <- struct{}{}:
		default:
		}
		err = cmd.Wait()
		client.Close()
		c.mu.Lock()
		c.rpc = nil
		c.up = make(chan struct{})
		c.mu.Unlock()
		if !c.isStopped() {
			c.Log.Error("the containerd runtime plugin exited; restarting it", "err", err)
			time.Sleep(delay)
		}
	}
}

func (c *Client) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// launch starts one plugin process and checks that it reaches containerd.
func (c *Client) launch() (*exec.Cmd, *rpcClient, error) {
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	// The plugin ends when its stdin does, so it dies with the daemon
	// however the daemon dies. (A parent-death signal would fire when the
	// thread that forked it exits, which Go threads do.)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the containerd runtime plugin: %w", err)
	}
	client := newRPCClient(stdout, stdin)
	var v pluginapi.VersionReply
	if err := client.Call(pluginapi.Service+".Version", pluginapi.Empty{}, &v); err != nil {
		client.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("the plugin cannot reach containerd: %w", err)
	}
	c.Log.Info("containerd connected", "version", v.Version)
	if c.OnVersion != nil {
		c.OnVersion(v.Version)
	}
	c.mu.Lock()
	c.rpc = client
	close(c.up)
	c.mu.Unlock()
	return cmd, client, nil
}

// Close stops the plugin. Containers keep running.
func (c *Client) Close() {
	c.mu.Lock()
	c.stopped = true
	client := c.rpc
	c.mu.Unlock()
	if client != nil {
		client.Close() // the plugin exits when its stdin closes
	}
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
	}
}

// callWait is how long a call waits for a plugin that is (re)starting.
const callWait = 5 * time.Second

func (c *Client) call(method string, args, reply any) error {
	c.mu.Lock()
	client, up := c.rpc, c.up
	c.mu.Unlock()
	if client == nil {
		select {
		case <-up:
		case <-time.After(callWait):
			return ErrNotRunning
		}
		c.mu.Lock()
		client = c.rpc
		c.mu.Unlock()
		if client == nil {
			return ErrNotRunning
		}
	}
	err := client.Call(pluginapi.Service+"."+method, args, reply)
	var remote remoteError
	if err != nil && !errors.As(err, &remote) {
		// Not the plugin's answer but the pipe's end: the plugin died
		// (shutdown, EOF, a closed pipe). What was asked is retried.
		return ErrNotRunning
	}
	return err
}

// ready returns a channel closed while a plugin is connected.
func (c *Client) ready() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// Run creates and starts a container and watches it. A failure to start
// is a reply with a reason, not an error; an error means the plugin could
// not be asked.
func (c *Client) Run(instanceID string, cfg pluginapi.ContainerConfig, pull pluginapi.PullAuth) (pluginapi.RunReply, error) {
	var reply pluginapi.RunReply
	if err := c.call("Run", pluginapi.RunArgs{Config: cfg, Pull: pull}, &reply); err != nil {
		return reply, err
	}
	if reply.Failure == nil {
		c.Watch(cfg.ID, instanceID)
	}
	return reply, nil
}

// Watch waits for a container to exit and reports it on Exits, across
// plugin restarts.
func (c *Client) Watch(id, instanceID string) {
	c.mu.Lock()
	if _, ok := c.waiting[id]; ok {
		c.mu.Unlock()
		return
	}
	c.waiting[id] = instanceID
	c.mu.Unlock()
	go func() {
		for {
			<-c.ready()
			var st pluginapi.ExitStatus
			err := c.call("Wait", pluginapi.IDArgs{ID: id}, &st)
			if errors.Is(err, ErrNotRunning) {
				time.Sleep(10 * time.Millisecond) // until the restart is seen
				continue
			}
			if err != nil {
				st = pluginapi.Unlocated(time.Now())
				st.Message = err.Error()
			}
			c.mu.Lock()
			delete(c.waiting, id)
			c.mu.Unlock()
			c.exits <- exitOf(instanceID, st)
			return
		}
	}()
}

// Signal sends sig to a container's main process.
func (c *Client) Signal(id string, sig syscall.Signal) error {
	return c.call("Signal", pluginapi.SignalArgs{ID: id, Signal: int(sig)}, &pluginapi.Empty{})
}

// Kill SIGKILLs every process of a container.
func (c *Client) Kill(id string) error {
	return c.call("Signal", pluginapi.SignalArgs{ID: id, Signal: int(syscall.SIGKILL), All: true}, &pluginapi.Empty{})
}

// Remove deletes a container, its task and its snapshot.
func (c *Client) Remove(id string) error {
	return c.call("Remove", pluginapi.IDArgs{ID: id}, &pluginapi.Empty{})
}

// ForgetShimGroup deletes the containers kept for a gone pod's shim.
func (c *Client) ForgetShimGroup(group string) error {
	return c.call("ForgetShimGroup", pluginapi.GroupArgs{Group: group}, &pluginapi.Empty{})
}

// List returns podvisor's containers in containerd.
func (c *Client) List() ([]pluginapi.Found, error) {
	var reply pluginapi.ListReply
	err := c.call("List", pluginapi.Empty{}, &reply)
	return reply.Containers, err
}

// Exec runs a command in a running container.
func (c *Client) Exec(id string, command []string, timeout time.Duration) (pluginapi.ExecReply, error) {
	var reply pluginapi.ExecReply
	err := c.call("Exec", pluginapi.ExecArgs{ID: id, Command: command, Timeout: timeout}, &reply)
	return reply, err
}

// SetupNetwork attaches a pod's network namespace to the CNI network.
func (c *Client) SetupNetwork(a pluginapi.NetworkArgs) ([]string, error) {
	var reply pluginapi.NetworkReply
	err := c.call("SetupNetwork", a, &reply)
	return reply.IPs, err
}

// TeardownNetwork detaches a pod from the CNI network.
func (c *Client) TeardownNetwork(a pluginapi.NetworkArgs) error {
	return c.call("TeardownNetwork", a, &pluginapi.Empty{})
}

// PruneImages removes unused images, least recently used first.
func (c *Client) PruneImages(a pluginapi.PruneArgs) (pluginapi.PruneReply, error) {
	var reply pluginapi.PruneReply
	err := c.call("PruneImages", a, &reply)
	return reply, err
}

// Images lists images.
func (c *Client) Images() ([]pluginapi.Image, error) {
	var reply pluginapi.ImagesReply
	err := c.call("Images", pluginapi.Empty{}, &reply)
	return reply.Images, err
}

// Import imports an image archive on the device.
func (c *Client) Import(path string) ([]string, error) {
	var reply pluginapi.ImportReply
	err := c.call("Import", pluginapi.ImportArgs{Path: path}, &reply)
	return reply.Names, err
}

// RemoveImage deletes an unused image.
func (c *Client) RemoveImage(name string) error {
	return c.call("RemoveImage", pluginapi.NameArgs{Name: name}, &pluginapi.Empty{})
}

var validID = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// ContainerID is the containerd ID of an instance: the instance ID where
// containerd accepts it (at most 76 characters), else a hash of it.
func ContainerID(instanceID string) string {
	if len(instanceID) <= 76 && validID.MatchString(instanceID) {
		return instanceID
	}
	sum := sha256.Sum256([]byte(instanceID))
	return "pv-" + hex.EncodeToString(sum[:24])
}

// exitOf is an exit the plugin reported, as the daemon keeps it.
func exitOf(instanceID string, st pluginapi.ExitStatus) runtime.Exit {
	return runtime.Exit{InstanceID: instanceID, ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason,
		Message: st.Message, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
}
