package kinds

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The failure threshold of a rollout, beyond Kubernetes (after AWS IoT
// jobs' abortConfig): when, among a workload's updated pods that reached
// a verdict, the share that failed reaches the threshold once at least
// the minimum have a verdict, the rollout halts.
const (
	// AnnotationFailureThreshold is the share, "20%" (or a whole number
	// of percent, "20"), from 1% to 100%.
	AnnotationFailureThreshold = "rollout.podvisor.io/failure-threshold"
	// AnnotationFailureMinimum is the least number of verdicts before the
	// threshold is checked (default 1).
	AnnotationFailureMinimum = "rollout.podvisor.io/failure-minimum"
)

// FailureThreshold is a workload's failure threshold; Percent 0: none.
type FailureThreshold struct {
	Percent int
	Minimum int
}

// ParseFailureThreshold reads a workload's failure threshold from its
// annotations; an error names the annotation and what is wrong.
func ParseFailureThreshold(annotations map[string]string) (FailureThreshold, error) {
	t := FailureThreshold{Minimum: 1}
	raw, ok := annotations[AnnotationFailureThreshold]
	if ok {
		n, err := strconv.Atoi(strings.TrimSuffix(raw, "%"))
		if err != nil || n < 1 || n > 100 || strings.Count(raw, "%") > 1 || strings.HasPrefix(raw, "+") {
			return t, fmt.Errorf("annotation %s: %q is not a percentage from 1%% to 100%%", AnnotationFailureThreshold, raw)
		}
		t.Percent = n
	}
	if raw, ok := annotations[AnnotationFailureMinimum]; ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > MaxReplicas || strings.HasPrefix(raw, "+") {
			return t, fmt.Errorf("annotation %s: %q is not a whole number from 1 to %d", AnnotationFailureMinimum, raw, MaxReplicas)
		}
		t.Minimum = n
	}
	return t, nil
}

func validateFailureThreshold(annotations map[string]string) field.ErrorList {
	path := field.NewPath("metadata", "annotations")
	var errs field.ErrorList
	for _, key := range []string{AnnotationFailureThreshold, AnnotationFailureMinimum} {
		if v, ok := annotations[key]; ok {
			if _, err := ParseFailureThreshold(map[string]string{key: v}); err != nil {
				_, msg, _ := strings.Cut(err.Error(), ": ")
				errs = append(errs, field.Invalid(path.Key(key), v, msg))
			}
		}
	}
	return errs
}
