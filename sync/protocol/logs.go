package protocol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Log topics: podhub logs (and the hub's pods/log) ask a device for a
// pod's log on logs-request, and the device streams it back in frames on
// logs. Neither is ever retained. A request is signed by the hub and bound
// to one device, one ID and a short validity, so neither a broker nor a
// captured request can make a device stream logs the hub did not ask for
// now; the frames go to the hub alone (only the hub reads a device's logs
// topic).
const (
	KindLogsRequest = "logs-request" // hub → device, signed: open, keep-alive, cancel
	KindLogs        = "logs"         // device → hub: frames of a stream
)

// Operations of a logs request.
const (
	LogsOpen      = "open"       // start a stream (Namespace, Pod, Options)
	LogsKeepAlive = "keep-alive" // a follow stream is still read
	LogsCancel    = "cancel"     // the reader went: stop
)

// Limits of the log documents.
const (
	// MaxLogsRequestBytes bounds a request as it travels (the broker's
	// per-topic limit).
	MaxLogsRequestBytes = 4 << 10
	// MaxLogsFrameData bounds the log bytes of one frame.
	MaxLogsFrameData = 16 << 10
	// MaxLogsFrameBytes bounds a frame as it travels: its header line and
	// its data.
	MaxLogsFrameBytes = maxLogsFrameHeader + 1 + MaxLogsFrameData
	// MaxLogsRequestTTL is the longest a request may be valid for
	// (Expires − Sent); a device also tolerates a clock off by as much.
	MaxLogsRequestTTL = 2 * time.Minute
	// DefaultLogsLimitBytes caps a stream whose request sets no
	// limitBytes (a device never streams more than this per request).
	DefaultLogsLimitBytes = 10 << 20
	maxLogsFrameHeader    = 1 << 10
	maxLogsErrorLen       = 512
	maxLogsIDLen          = 64
	maxLogsTailLines      = 1 << 20
)

// LogsRequest is the hub's request about a log stream, signed
// (SignLogsRequest).
type LogsRequest struct {
	Schema int    `json:"schema"`
	Device string `json:"device"`
	// ID names the stream: random, 16 to 64 hex digits; an open with an
	// ID the device has seen is a replay and refused.
	ID string `json:"id"`
	Op string `json:"op"` // LogsOpen, LogsKeepAlive or LogsCancel
	// Sent and Expires are on the hub's clock: a device takes the request
	// only while its own clock is within [Sent − ttl, Expires + ttl], ttl
	// being Expires − Sent (at most MaxLogsRequestTTL).
	Sent    time.Time `json:"sent"`
	Expires time.Time `json:"expires"`
	// Namespace, Pod and Options are an open's.
	Namespace string       `json:"namespace,omitempty"`
	Pod       string       `json:"pod,omitempty"`
	Options   *LogsOptions `json:"options,omitempty"`
}

// LogsOptions are v1.PodLogOptions' fields that a device honours, with
// their meaning.
type LogsOptions struct {
	Container    string     `json:"container,omitempty"`
	Follow       bool       `json:"follow,omitempty"`
	Previous     bool       `json:"previous,omitempty"`
	Timestamps   bool       `json:"timestamps,omitempty"`
	SinceSeconds *int64     `json:"sinceSeconds,omitempty"`
	SinceTime    *time.Time `json:"sinceTime,omitempty"`
	TailLines    *int64     `json:"tailLines,omitempty"`
	LimitBytes   *int64     `json:"limitBytes,omitempty"`
}

// Validate checks the options as the API server validates
// PodLogOptions, and this protocol's bounds.
func (o *LogsOptions) Validate() error {
	if o.Container != "" {
		if msgs := validation.IsDNS1123Label(o.Container); len(msgs) > 0 {
			return fmt.Errorf("options.container %s: %s", quote(o.Container), msgs[0])
		}
	}
	if o.SinceSeconds != nil && o.SinceTime != nil {
		return errors.New("options: at most one of sinceTime or sinceSeconds may be specified")
	}
	if o.SinceSeconds != nil && *o.SinceSeconds < 1 {
		return errors.New("options.sinceSeconds: must be greater than 0")
	}
	if o.TailLines != nil && (*o.TailLines < 0 || *o.TailLines > maxLogsTailLines) {
		return fmt.Errorf("options.tailLines: must be 0 to %d", maxLogsTailLines)
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		return errors.New("options.limitBytes: must be greater than 0")
	}
	return nil
}

// Signature context of a logs request.
const contextLogsRequest = "podvisor logs request\n"

func (r *LogsRequest) validate() error {
	if len(r.ID) < 16 || len(r.ID) > maxLogsIDLen {
		return fmt.Errorf("id %s: want 16 to %d hex digits", quote(r.ID), maxLogsIDLen)
	}
	if _, err := hex.DecodeString(r.ID); err != nil || strings.ToLower(r.ID) != r.ID {
		return fmt.Errorf("id %s: want lower-case hex digits", quote(r.ID))
	}
	ttl := r.Expires.Sub(r.Sent)
	if r.Sent.IsZero() || ttl <= 0 || ttl > MaxLogsRequestTTL {
		return fmt.Errorf("sent %s, expires %s: want expires after sent, by at most %s", r.Sent.Format(time.RFC3339), r.Expires.Format(time.RFC3339), MaxLogsRequestTTL)
	}
	switch r.Op {
	case LogsOpen:
		if msgs := validation.IsDNS1123Label(r.Namespace); len(msgs) > 0 {
			return fmt.Errorf("namespace %s: %s", quote(r.Namespace), msgs[0])
		}
		if msgs := validation.IsDNS1123Subdomain(r.Pod); len(msgs) > 0 {
			return fmt.Errorf("pod %s: %s", quote(r.Pod), msgs[0])
		}
		if r.Options == nil {
			return errors.New("an open without options")
		}
		return r.Options.Validate()
	case LogsKeepAlive, LogsCancel:
		if r.Namespace != "" || r.Pod != "" || r.Options != nil {
			return fmt.Errorf("a %s names no pod and no options", r.Op)
		}
		return nil
	}
	return fmt.Errorf("op %s: want %s, %s or %s", quote(r.Op), LogsOpen, LogsKeepAlive, LogsCancel)
}

// SignLogsRequest validates, encodes and signs a request with the hub key.
func SignLogsRequest(r LogsRequest, key ed25519.PrivateKey) ([]byte, error) {
	r.Schema = Schema
	if err := ValidDeviceID(r.Device); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("logs request: %w", err)
	}
	return signDoc(contextLogsRequest, r, key)
}

// OpenLogsRequest checks a request: size, the hub's signature, that it is
// for this device, its fields, and that now (the device's clock) is within
// its validity, widened by its own length on both sides for a device
// clock that is off. Replays within that are the caller's to refuse (by
// ID for an open, by Sent for the rest of a stream).
func OpenLogsRequest(data []byte, device string, hub ed25519.PublicKey, now time.Time) (*LogsRequest, error) {
	var r LogsRequest
	if err := openDoc("logs request", contextLogsRequest, data, MaxLogsRequestBytes, hub, &r, func() int { return r.Schema }); err != nil {
		return nil, err
	}
	if r.Device != device {
		return nil, fmt.Errorf("logs request is for device %s, this is %q", quote(r.Device), device)
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("logs request: %w", err)
	}
	ttl := r.Expires.Sub(r.Sent)
	if now.Before(r.Sent.Add(-ttl)) || now.After(r.Expires.Add(ttl)) {
		return nil, fmt.Errorf("logs request %s: valid from %s to %s (±%s for this device's clock), and it is %s here",
			r.ID, r.Sent.Format(time.RFC3339), r.Expires.Format(time.RFC3339), ttl, now.Format(time.RFC3339))
	}
	return &r, nil
}

// Reasons a device gives for refusing or ending a stream: the Kubernetes
// status reasons the hub answers with.
const (
	LogsNotFound        = "NotFound"
	LogsBadRequest      = "BadRequest"
	LogsTooManyRequests = "TooManyRequests"
	LogsInternalError   = "InternalError"
)

// LogsFrame is one message of a stream, device → hub: a JSON header line,
// then up to MaxLogsFrameData bytes of log text (no base64). Frames of a
// stream are numbered from 0 with no gap; frame 0 says the log was found
// (it may carry data). The last frame has End, and Error with Reason when
// the stream failed or was refused (then it carries no data).
type LogsFrame struct {
	Schema  int    `json:"schema"`
	Request string `json:"request"`
	Seq     int64  `json:"seq"`
	End     bool   `json:"end,omitempty"`
	Error   string `json:"error,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// LogsError is a refusal or failure a device reports in kubelet words,
// with the status reason the hub answers with.
type LogsError struct {
	Reason  string
	Message string
}

func (e *LogsError) Error() string { return e.Message }

// EncodeLogsFrame writes a frame: its header, a newline, its data.
func EncodeLogsFrame(f LogsFrame, data []byte) ([]byte, error) {
	f.Schema = Schema
	if len(data) > MaxLogsFrameData {
		return nil, fmt.Errorf("logs frame: %d bytes of data, over the %d limit", len(data), MaxLogsFrameData)
	}
	f.Error = clipText(f.Error, maxLogsErrorLen)
	h, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	if len(h) > maxLogsFrameHeader {
		return nil, fmt.Errorf("logs frame: a header of %d bytes, over the limit", len(h))
	}
	out := make([]byte, 0, len(h)+1+len(data))
	return append(append(append(out, h...), '\n'), data...), nil
}

// DecodeLogsFrame splits and checks a frame strictly; data aliases payload.
func DecodeLogsFrame(payload []byte) (*LogsFrame, []byte, error) {
	if len(payload) > MaxLogsFrameBytes {
		return nil, nil, fmt.Errorf("logs frame: %d bytes, over the %d byte limit", len(payload), MaxLogsFrameBytes)
	}
	i := bytes.IndexByte(payload, '\n')
	if i < 0 || i > maxLogsFrameHeader {
		return nil, nil, errors.New("logs frame: no header line")
	}
	var f LogsFrame
	if err := decodeStrict("logs frame", payload[:i], maxLogsFrameHeader, &f, func() int { return f.Schema }); err != nil {
		return nil, nil, err
	}
	data := payload[i+1:]
	switch {
	case len(f.Request) < 16 || len(f.Request) > maxLogsIDLen:
		return nil, nil, fmt.Errorf("logs frame: request %s: want 16 to %d hex digits", quote(f.Request), maxLogsIDLen)
	case f.Seq < 0:
		return nil, nil, fmt.Errorf("logs frame: seq %d is negative", f.Seq)
	case len(data) > MaxLogsFrameData:
		return nil, nil, fmt.Errorf("logs frame: %d bytes of data, over the %d limit", len(data), MaxLogsFrameData)
	case f.Error != "" && (!f.End || len(data) > 0):
		return nil, nil, errors.New("logs frame: an error must end the stream and carry no data")
	case len(f.Error) > maxLogsErrorLen+32:
		return nil, nil, errors.New("logs frame: error too long")
	}
	switch f.Reason {
	case "":
		if f.Error != "" {
			return nil, nil, errors.New("logs frame: an error without a reason")
		}
	case LogsNotFound, LogsBadRequest, LogsTooManyRequests, LogsInternalError:
		if f.Error == "" {
			return nil, nil, errors.New("logs frame: a reason without an error")
		}
	default:
		return nil, nil, fmt.Errorf("logs frame: reason %s, want %s, %s, %s or %s", quote(f.Reason), LogsNotFound, LogsBadRequest, LogsTooManyRequests, LogsInternalError)
	}
	// Shown on the operator's terminal: one line, no escape sequences.
	f.Error = oneLine(f.Error)
	return &f, data, nil
}
