package kubeapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podLogs serves pods/log: the pod resolved to its device and its name
// there (a mirror pod's <name>-<device> back to <name>), the stream from
// Logs.
func (s *Server) podLogs(w http.ResponseWriter, r *http.Request, req request) {
	if req.res != resPods || req.namespace == "" {
		writeStatus(w, notFoundPath(strings.Trim(r.URL.Path, "/")))
		return
	}
	opts, err := logOptions(r.URL.Query())
	if err != nil {
		writeStatus(w, err)
		return
	}
	o := s.store.get(resPods, req.namespace, req.name)
	if o == nil {
		writeStatus(w, apierrors.NewNotFound(resPods.groupResource(), req.name))
		return
	}
	pod := o.obj.(*v1.Pod)
	if o.device == "" {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", req.name)))
		return
	}
	if opts.Container, err = logContainer(pod, opts.Container); err != nil {
		writeStatus(w, err)
		return
	}
	if s.cfg.Logs == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("this hub serves no pod logs"))
		return
	}
	lw := &logWriter{w: w, rc: http.NewResponseController(w)}
	err = s.cfg.Logs.PodLogs(r.Context(), o.device, req.namespace, o.origName, opts, lw)
	if err != nil && !lw.started {
		writeStatus(w, err)
	}
}

// logWriter sends the header with the first bytes, and flushes each
// write so that a follower sees each line as it comes.
type logWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (l *logWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "text/plain")
		l.w.WriteHeader(http.StatusOK)
	}
	n, err := l.w.Write(p)
	if err == nil {
		err = l.rc.Flush()
	}
	return n, err
}

// logContainer is the container a log request names, defaulted as the
// API server defaults it (the only container), or its BadRequest.
func logContainer(p *v1.Pod, name string) (string, error) {
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	if name == "" {
		if len(names) == 1 {
			return names[0], nil
		}
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", p.Name, names))
	}
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return name, nil
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return name, nil
		}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if c.Name == name {
			return name, nil
		}
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, p.Name))
}

// logOptions decodes PodLogOptions from a query, checked as the API
// server's validation checks them.
func logOptions(q url.Values) (*v1.PodLogOptions, error) {
	opts := &v1.PodLogOptions{Container: q.Get("container")}
	var errs []string
	boolean := func(name string, into *bool) {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: Invalid value: %q", name, v))
			}
			*into = b
		}
	}
	integer := func(name string, min int64) *int64 {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			errs = append(errs, fmt.Sprintf("%s: Invalid value: %q: must be greater than or equal to %d", name, v, min))
			return nil
		}
		return &n
	}
	boolean("follow", &opts.Follow)
	boolean("previous", &opts.Previous)
	boolean("timestamps", &opts.Timestamps)
	boolean("insecureSkipTLSVerifyBackend", &opts.InsecureSkipTLSVerifyBackend)
	opts.SinceSeconds = integer("sinceSeconds", 1)
	opts.TailLines = integer("tailLines", 0)
	opts.LimitBytes = integer("limitBytes", 1)
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("sinceTime: Invalid value: %q: must be RFC 3339", v))
		} else {
			mt := metav1.NewTime(t)
			opts.SinceTime = &mt
		}
	}
	if opts.SinceSeconds != nil && opts.SinceTime != nil {
		errs = append(errs, "at most one of `sinceTime` or `sinceSeconds` may be specified")
	}
	if len(errs) > 0 {
		return nil, apierrors.NewBadRequest(strings.Join(errs, ", "))
	}
	return opts, nil
}
