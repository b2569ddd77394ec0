// Package logind delays a system shutdown until podvisor has stopped its
// pods, as the kubelet's graceful node shutdown does: it holds a logind
// "delay" inhibitor lock, and on PrepareForShutdown(true) drains the node
// and only then releases the lock, letting the shutdown go on.
package logind

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/login1"
	"github.com/godbus/dbus/v5"
)

// Node is what a shutdown does to the node.
type Node interface {
	// Drain stops every pod by priority and returns when they are gone
	// or the shutdown buckets' time is up.
	Drain(reason string) error
	// Uncordon admits pods again after a cancelled shutdown.
	Uncordon() error
}

// Watcher follows logind's shutdown announcements.
type Watcher struct {
	Node Node
	Log  *slog.Logger
	// Need is how long a drain may take (the shutdown buckets' sum):
	// logind's InhibitDelayMaxSec is raised to it when shorter.
	Need time.Duration
	// DropInDir is where the raise is written (logind reads
	// /run/systemd/logind.conf.d; /etc may be read-only on a device).
	DropInDir string
}

// Available reports whether the system runs systemd, whose logind
// announces shutdowns.
func Available() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// Run holds an inhibitor lock and answers shutdowns until ctx ends. A lost
// connection (logind or D-Bus restarted) is made again, backing off.
func (w *Watcher) Run(ctx context.Context) {
	backoff := time.Second
	for {
		err := w.session(ctx)
		if ctx.Err() != nil {
			return
		}
		w.Log.Warn("logind: shutdown inhibitor lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

const (
	prepareForShutdown = "org.freedesktop.login1.Manager.PrepareForShutdown"
	why                = "podvisor stops pods by priority before the system shuts down"
)

// session is one connection to logind: subscribe first (so no signal is
// missed), then take the lock.
func (w *Watcher) session(ctx context.Context) error {
	conn, err := login1.New()
	if err != nil {
		return fmt.Errorf("connecting to logind: %w", err)
	}
	defer conn.Close()
	w.ensureDelay()
	signals := conn.Subscribe("PrepareForShutdown")
	inhibit := func() (*os.File, error) { return conn.Inhibit("shutdown", "podvisor", why, "delay") }
	lock, err := inhibit()
	if err != nil {
		return fmt.Errorf("taking the shutdown inhibitor lock: %w", err)
	}
	w.Log.Info("logind: holding a shutdown delay lock", "need", w.Need)
	defer func() {
		if lock != nil {
			lock.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig, ok := <-signals:
			if !ok {
				return errors.New("D-Bus connection closed")
			}
			if sig.Name != prepareForShutdown || len(sig.Body) != 1 {
				continue
			}
			starting, _ := sig.Body[0].(bool)
			switch {
			case starting && lock != nil:
				w.Log.Warn("logind: the system is shutting down; stopping pods")
				if err := w.Node.Drain("node shutdown"); err != nil {
					w.Log.Error("drain before shutdown", "err", err)
				}
				lock.Close()
				lock = nil
				w.Log.Info("logind: pods stopped; released the shutdown lock")
			case !starting && lock == nil:
				// The shutdown was cancelled: run pods again and be ready
				// for the next one.
				w.Log.Info("logind: shutdown cancelled; admitting pods again")
				if err := w.Node.Uncordon(); err != nil {
					w.Log.Warn("uncordon after cancelled shutdown", "err", err)
				}
				if lock, err = inhibit(); err != nil {
					return fmt.Errorf("taking the shutdown inhibitor lock again: %w", err)
				}
			}
		}
	}
}

// ensureDelay raises logind's InhibitDelayMaxSec (default 5 s) to Need, as
// the kubelet does, by a drop-in and a reload of logind: a delay lock
// holds a shutdown only that long.
func (w *Watcher) ensureDelay() {
	have, err := inhibitDelayMax()
	if err != nil {
		w.Log.Warn("logind: reading InhibitDelayMaxUSec", "err", err)
		return
	}
	if have >= w.Need {
		return
	}
	conf := fmt.Sprintf("# Written by podvisor: time to stop pods before a shutdown.\n[Login]\nInhibitDelayMaxSec=%d\n",
		int64((w.Need+time.Second-1)/time.Second))
	dir := w.DropInDir
	if dir == "" {
		dir = "/run/systemd/logind.conf.d"
	}
	if err = os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, "99-podvisor.conf"), []byte(conf), 0o644)
	}
	if err == nil {
		err = reloadLogind()
	}
	if err != nil {
		w.Log.Warn("logind: cannot raise InhibitDelayMaxSec; a shutdown may cut pods' grace short",
			"have", have, "need", w.Need, "err", err)
		return
	}
	// logind rereads its configuration on SIGHUP, asynchronously.
	for i := 0; i < 50; i++ {
		if have, err = inhibitDelayMax(); err == nil && have >= w.Need {
			w.Log.Info("logind: raised InhibitDelayMaxSec", "to", have)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.Log.Warn("logind: InhibitDelayMaxSec is still short after a reload", "have", have, "need", w.Need)
}

func systemBus() (*dbus.Conn, error) {
	conn, err := dbus.SystemBusPrivate()
	if err != nil {
		return nil, err
	}
	if err = conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err == nil {
		err = conn.Hello()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// inhibitDelayMax is logind's InhibitDelayMaxUSec.
func inhibitDelayMax() (time.Duration, error) {
	conn, err := systemBus()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	v, err := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").
		GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is a %T", v.Value())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// reloadLogind sends logind SIGHUP through systemd, which knows its pid.
func reloadLogind() error {
	conn, err := systemBus()
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		Call("org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "main", int32(1)).Err
}
