package sdnotify

import (
	"fmt"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Socket is the service manager's notify socket, as the environment names
// it (NOTIFY_SOCKET, set by systemd for Type=notify units).
type Socket struct {
	// Watchdog is the service manager's watchdog period for this process
	// (WATCHDOG_USEC, if WATCHDOG_PID is this process or unset; 0: none).
	Watchdog time.Duration
}

// FromEnv returns the socket the environment names, or nil when there is
// none: the daemon then sends nothing.
func FromEnv() (*Socket, error) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return nil, nil
	}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return nil, fmt.Errorf("systemd watchdog: %w", err)
	}
	return &Socket{Watchdog: wd}, nil
}

// Send sends one message (assignments separated by newlines).
func (s *Socket) Send(msg string) error {
	_, err := daemon.SdNotify(false, msg)
	return err
}
