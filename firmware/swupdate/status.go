package swupdate

import "strings"

// An install's outcome comes from GET_STATUS, not from the progress
// socket: SWUpdate's progress thread accept()s connections on its own and
// sends no greeting, so a connection made just before an install that
// fails at once (a .swu that is not one) may be registered only after the
// FAILURE message went out, and a client waiting for it waits forever.
// GET_STATUS (core/network_thread.c) answers, per request, the oldest
// notification still queued (its status and text) or, with none queued,
// the installer's status; and always last_install, the last result. The
// queue is emptied when an install is accepted, so what follows the ACK is
// this install's: its messages, then IDLE ("Waiting for requests...")
// once it ended and last_install is set (core/stream_interface.c sets
// last_install, then the status IDLE, then notifies IDLE).

// watch is what GET_STATUS told of one install so far: a pure fold of the
// replies, in order.
type watch struct {
	// started: SWUpdate showed this install (a notification, or a status
	// other than IDLE); before that, IDLE is the previous install's.
	started bool
	// done: the install ended; result is then last_install.
	done   bool
	result uint32
	errs   []string
	n      int
}

// observe folds one reply in; more says another notification may be
// queued (ask again at once).
func (w *watch) observe(r reply) (more bool) {
	if r.desc != "" {
		w.started = true
		switch r.status {
		case statusFailure: // ERROR()s and the final failure
			if w.n < maxErrors {
				w.errs = append(w.errs, r.desc)
				w.n += len(r.desc)
			}
		case statusIdle: // the installer went back to waiting
			w.done, w.result = true, r.lastResult
		}
		return !w.done
	}
	switch {
	case r.status != statusIdle:
		w.started = true
	case w.started:
		// IDLE with its notification not queued yet (or taken by another
		// client): last_install is already set.
		w.done, w.result = true, r.lastResult
	}
	return false
}

// why is SWUpdate's messages of a failed install.
func (w *watch) why() string { return strings.Join(w.errs, "; ") }
