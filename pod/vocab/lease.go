package vocab

import (
	"fmt"
	"strconv"
)

// AnnotationLeaseSeconds opts a pod into a self-fencing lease: its device
// stops it once it has not heard from the hub for that many seconds, so
// the hub may replace it elsewhere after the same silence on its own
// clock, plus the pod's grace period and a margin. Device and hub read it.
const AnnotationLeaseSeconds = "fencing.podvisor.io/lease-seconds"

// MaxLeaseSeconds bounds a lease: a day.
const MaxLeaseSeconds = 86400

// ParseLeaseSeconds is a pod's self-fencing lease in seconds from its
// annotations: 0 without the annotation, an error unless it is a whole
// number of seconds in 1..MaxLeaseSeconds written plainly.
func ParseLeaseSeconds(annotations map[string]string) (int64, error) {
	v, ok := annotations[AnnotationLeaseSeconds]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > MaxLeaseSeconds || strconv.FormatInt(n, 10) != v {
		return 0, fmt.Errorf("%s: %q must be a whole number of seconds from 1 to %d", AnnotationLeaseSeconds, v, MaxLeaseSeconds)
	}
	return n, nil
}
