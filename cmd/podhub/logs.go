package main

import (
	"context"
	"errors"
	"flag"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// logs prints a pod's log from its device, over the hub's broker, with
// kubectl logs' flags.
func (c *cli) logs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	device := fs.String("device", "", "the device that runs the pod (required)")
	namespace := fs.String("n", "default", "the pod's namespace")
	fs.StringVar(namespace, "namespace", "default", "the pod's namespace")
	container := fs.String("c", "", "the container (needed when the pod has several)")
	fs.StringVar(container, "container", "", "the container (needed when the pod has several)")
	follow := fs.Bool("f", false, "follow the log until Ctrl-C or the container ends")
	fs.BoolVar(follow, "follow", false, "follow the log until Ctrl-C or the container ends")
	previous := fs.Bool("previous", false, "the previous, terminated instance's log")
	fs.BoolVar(previous, "p", false, "the previous, terminated instance's log")
	timestamps := fs.Bool("timestamps", false, "start each line with its time (RFC 3339)")
	tail := fs.Int64("tail", -1, "the last N lines only (-1: all)")
	since := fs.Duration("since", 0, "only lines newer than this (5s, 2m, 3h)")
	sinceTime := fs.String("since-time", "", "only lines after this RFC 3339 time")
	limit := fs.Int64("limit-bytes", 0, "at most this many bytes (the device caps a request at 10 MiB)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *device == "" {
		return errors.New("usage: podhub logs POD --device ID [-n NAMESPACE] [-c CONTAINER] [--previous] [--tail N] [--since D] [--timestamps] [-f]")
	}
	opts := &v1.PodLogOptions{Container: *container, Follow: *follow, Previous: *previous, Timestamps: *timestamps}
	if *tail >= 0 {
		opts.TailLines = tail
	}
	if *since != 0 && *sinceTime != "" {
		return errors.New("logs: at most one of --since-time or --since may be specified")
	}
	if *since < 0 {
		return errors.New("logs: --since must be greater than 0")
	}
	if *since > 0 {
		secs := int64(math.Ceil(since.Seconds())) // as kubectl rounds
		opts.SinceSeconds = &secs
	}
	if *sinceTime != "" {
		t, err := time.Parse(time.RFC3339, *sinceTime)
		if err != nil {
			return errors.New("logs: --since-time must be an RFC 3339 time")
		}
		opts.SinceTime = &metav1.Time{Time: t}
	}
	if *limit != 0 {
		opts.LimitBytes = limit
	}
	return c.client().Log(ctx, *device, *namespace, pos[0], opts, c.out)
}
