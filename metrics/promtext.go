// Package metrics writes the Prometheus text exposition format (version
// 0.0.4), by hand: the daemon's size budget has no room for
// client_golang and the protobuf it pulls. It also holds the two
// instruments the writers need, a counter vector and a histogram, safe
// for concurrent use. Both binaries use it; it imports nothing of
// either.
package metrics

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ContentType is the exposition's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Type is a metric family's type.
type Type string

const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Family describes one metric family: what an exposition writes under
// its name, what dashboards and docs are checked against.
type Family struct {
	Name   string
	Help   string
	Type   Type
	Labels []string // in the order the samples carry them
}

// Writer builds one exposition. Each family is written once, all its
// samples after its Family line (the text format requires them
// together); a second Family of one name is an error, kept in Err.
type Writer struct {
	buf  bytes.Buffer
	seen map[string]bool
	cur  string
	err  error
}

// Family starts a metric family: its HELP and TYPE lines.
func (w *Writer) Family(name, help string, typ Type) {
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	if !validName(name) {
		w.fail(fmt.Errorf("metric name %q is not a valid Prometheus name", name))
		return
	}
	if w.seen[name] {
		w.fail(fmt.Errorf("metric family %s written twice", name))
		return
	}
	w.seen[name], w.cur = true, name
	w.buf.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n")
	w.buf.WriteString("# TYPE " + name + " " + string(typ) + "\n")
}

// Sample writes one sample of the current family; labels are name,
// value pairs.
func (w *Writer) Sample(value float64, labels ...string) {
	w.sample(w.cur, "", value, labels)
}

// HistogramSample writes one histogram of the current family: its
// cumulative buckets, sum and count.
func (w *Writer) HistogramSample(h HistogramValue, labels ...string) {
	var cum uint64
	for i, upper := range h.Buckets {
		cum += h.Counts[i]
		w.sample(w.cur+"_bucket", formatFloat(upper), float64(cum), labels)
	}
	w.sample(w.cur+"_bucket", "+Inf", float64(h.Count), labels)
	w.sample(w.cur+"_sum", "", h.Sum, labels)
	w.sample(w.cur+"_count", "", float64(h.Count), labels)
}

func (w *Writer) sample(name, le string, value float64, labels []string) {
	if w.cur == "" {
		w.fail(fmt.Errorf("sample of %s before its family", name))
		return
	}
	if len(labels)%2 != 0 {
		w.fail(fmt.Errorf("%s: labels are name, value pairs, got %d strings", name, len(labels)))
		return
	}
	w.buf.WriteString(name)
	if len(labels) > 0 || le != "" {
		w.buf.WriteByte('{')
		for i := 0; i < len(labels); i += 2 {
			if !validLabel(labels[i]) {
				w.fail(fmt.Errorf("%s: label name %q is not valid", name, labels[i]))
				return
			}
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.buf.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		if le != "" {
			if len(labels) > 0 {
				w.buf.WriteByte(',')
			}
			w.buf.WriteString(`le="` + le + `"`)
		}
		w.buf.WriteByte('}')
	}
	w.buf.WriteByte(' ')
	w.buf.WriteString(formatFloat(value))
	w.buf.WriteByte('\n')
}

func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// Err is the first misuse met, if any.
func (w *Writer) Err() error { return w.err }

// Bytes is the exposition so far.
func (w *Writer) Bytes() []byte { return w.buf.Bytes() }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// validName is Prometheus' metric name rule: [a-zA-Z_:][a-zA-Z0-9_:]*.
func validName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// validLabel is the label name rule: [a-zA-Z_][a-zA-Z0-9_]*, "le" kept
// for buckets.
func validLabel(s string) bool {
	return validName(s) && !strings.Contains(s, ":") && s != "le"
}

// Grow makes room for n more bytes of exposition at once: a writer that
// knows its last exposition's size saves growing the buffer by doubling.
func (w *Writer) Grow(n int) { w.buf.Grow(n) }
