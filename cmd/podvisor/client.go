package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/firmware/agent"
	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/podrow"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
)

func newClient(socket string) *api.Client { return api.NewClient(socket) }

// clientFlags are the flags every client command takes.
type clientFlags struct {
	socket    *string
	namespace *string
}

func addClientFlags(fs *flag.FlagSet) clientFlags {
	return clientFlags{
		socket:    fs.String("socket", defaultSocket, "daemon socket"),
		namespace: fs.String("n", "", "namespace (default: any namespace with the name, preferring default)"),
	}
}

// findPod resolves a name the way a user means it: in the namespace given,
// else in "default", else the only pod of that name anywhere. A rejected
// manifest file's row (get shows it named after the file, e.g. bad.yaml)
// is also found by the file name without its extension.
func findPod(ctx context.Context, c *api.Client, ns, name string) (*v1.Pod, error) {
	if ns != "" {
		p, err := c.Pod(ctx, ns, name)
		if err == nil {
			return p, nil
		}
		list, lerr := c.Pods(ctx)
		if lerr != nil {
			return nil, err
		}
		for i := range list.Items {
			if q := &list.Items[i]; q.Namespace == ns && namesInvalidFile(q, name) {
				return q, nil
			}
		}
		return nil, err
	}
	list, err := c.Pods(ctx)
	if err != nil {
		return nil, err
	}
	var matches, files []*v1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case p.Name == name && p.Namespace == "default":
			return p, nil
		case p.Name == name:
			matches = append(matches, p)
		case namesInvalidFile(p, name):
			files = append(files, p)
		}
	}
	if len(matches) == 0 {
		matches = files
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("pod %q not found", name)
	case 1:
		return matches[0], nil
	}
	return nil, fmt.Errorf("pod %q exists in several namespaces: choose one with -n", name)
}

// namesInvalidFile reports whether p is the row of a rejected manifest
// file that name means: bad.yaml is named bad.yaml or bad.
func namesInvalidFile(p *v1.Pod, name string) bool {
	if p.Status.Reason != supervisor.StatusInvalid {
		return false
	}
	return p.Name == name || strings.TrimSuffix(p.Name, filepath.Ext(p.Name)) == name
}

func cmdGet(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	cf := addClientFlags(fs)
	output := fs.String("o", "", "output format: wide, json or yaml")
	all := fs.Bool("A", false, "pods of every namespace, with a NAMESPACE column")
	fs.BoolVar(all, "all-namespaces", false, "same as -A")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 && (pos[0] == "node" || pos[0] == "nodes" || pos[0] == "no") {
		return getNode(ctx, newClient(*cf.socket), *output, out)
	}
	if len(pos) == 0 || (pos[0] != "pods" && pos[0] != "pod" && pos[0] != "po") {
		return fmt.Errorf("usage: podvisor get pods [NAME] [-o wide|json|yaml] | podvisor get node [-o json|yaml]")
	}
	if len(pos) > 2 {
		return fmt.Errorf("get: unexpected argument %q", pos[2])
	}
	switch *output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("get: unknown output format %q (want wide, json or yaml)", *output)
	}
	c := newClient(*cf.socket)
	if len(pos) == 2 {
		p, err := findPod(ctx, c, *cf.namespace, pos[1])
		if err != nil {
			return err
		}
		p.APIVersion, p.Kind = "v1", "Pod"
		if *output == "json" || *output == "yaml" {
			return printObject(out, p, *output)
		}
		return printPods(out, []v1.Pod{*p}, *output == "wide", false, time.Now())
	}
	list, err := c.Pods(ctx)
	if err != nil {
		return err
	}
	if *cf.namespace != "" && !*all {
		kept := list.Items[:0]
		for _, p := range list.Items {
			if p.Namespace == *cf.namespace {
				kept = append(kept, p)
			}
		}
		list.Items = kept
	}
	if *output == "json" || *output == "yaml" {
		return printObject(out, list, *output)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(stderr, "No pods found.")
		return nil
	}
	return printPods(out, list.Items, *output == "wide", *all, time.Now())
}

func getNode(ctx context.Context, c *api.Client, output string, out io.Writer) error {
	n, err := c.Node(ctx)
	if err != nil {
		return err
	}
	if output == "json" || output == "yaml" {
		return printObject(out, n, output)
	}
	status := "NotReady"
	var pressure []string
	for _, cond := range n.Status.Conditions {
		switch {
		case cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue:
			status = "Ready"
		case cond.Type != v1.NodeReady && cond.Status == v1.ConditionTrue:
			pressure = append(pressure, string(cond.Type))
		}
	}
	if len(pressure) > 0 {
		status += "," + strings.Join(pressure, ",")
	}
	if n.Spec.Unschedulable { // cordoned by a drain, as kubectl shows it
		status += ",SchedulingDisabled"
	}
	a := n.Status.Allocatable
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tSTATUS\tVERSION\tCPU\tMEMORY\tPODS")
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, status, n.Status.NodeInfo.KubeletVersion,
		a.Cpu().String(), a.Memory().String(), a.Pods().String())
	if err := w.Flush(); err != nil {
		return err
	}
	// An update or a firmware install under way, or the last one's end.
	if u := n.Annotations[agent.NodeAnnotation]; u != "" {
		_, err := fmt.Fprintf(out, "Update: %s\n", u)
		return err
	}
	return nil
}

func printObject(out io.Writer, v any, format string) error {
	if format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "    ")
	return enc.Encode(v)
}

// printPods prints kubectl's columns; allNamespaces puts NAMESPACE first,
// as kubectl get pods -A does.
func printPods(out io.Writer, pods []v1.Pod, wide, allNamespaces bool, now time.Time) error {
	sort.SliceStable(pods, func(i, j int) bool {
		if allNamespaces && pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	header := "NAME\tREADY\tSTATUS\tRESTARTS\tAGE"
	if allNamespaces {
		header = "NAMESPACE\t" + header
	}
	if wide {
		if !allNamespaces {
			header += "\tNAMESPACE"
		}
		header += "\tIP\tNODE\tSOURCE"
	}
	fmt.Fprintln(w, header)
	for i := range pods {
		p := &pods[i]
		row := podrow.Of(p, now)
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", p.Name, row.Ready, row.Status, row.Restarts, row.Age)
		if allNamespaces {
			line = p.Namespace + "\t" + line
		}
		if wide {
			if !allNamespaces {
				line += "\t" + p.Namespace
			}
			line += fmt.Sprintf("\t%s\t%s\t%s", orNone(p.Status.PodIP), orNone(p.Spec.NodeName),
				orNone(p.Annotations["podvisor.io/source"]))
		}
		fmt.Fprintln(w, line)
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func cmdDelete(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	cf := addClientFlags(fs)
	grace := fs.Int64("grace-period", -1, "seconds to wait before SIGKILL (shorter than the pod's own only)")
	force := fs.Bool("force", false, "with --grace-period 0: kill at once")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || (pos[0] != "pod" && pos[0] != "pods" && pos[0] != "po") {
		return fmt.Errorf("usage: podvisor delete pod NAME [--grace-period N] [--force]")
	}
	var g *int64
	if *grace >= 0 {
		g = grace
	}
	if *force && (g == nil || *g != 0) {
		return fmt.Errorf("--force needs --grace-period 0")
	}
	c := newClient(*cf.socket)
	p, err := findPod(ctx, c, *cf.namespace, pos[1])
	if err != nil {
		return err
	}
	if *force {
		fmt.Fprintln(stderr, "Warning: Immediate deletion kills the pod's containers without waiting for a graceful stop "+
			"(no preStop hook, no grace period). podvisor still waits until every process has ended before the pod "+
			"can run again, so at most one copy ever runs.")
	}
	res, err := c.Delete(ctx, p.Namespace, p.Name, g, *force)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pod %q deleted\n", p.Name)
	switch {
	case res.Recreated && res.Source == manifest.SourceHub:
		fmt.Fprintf(stderr, "note: the hub still assigns pod %q to this device, so it starts again; remove it at the hub to remove the pod\n", p.Name)
	case res.Recreated:
		fmt.Fprintf(stderr, "note: %s still defines pod %q, so it starts again; remove the file to remove the pod\n", orNone(res.File), p.Name)
	}
	return nil
}

func cmdLogs(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	cf := addClientFlags(fs)
	container := fs.String("c", "", "container (needed when the pod has several)")
	follow := fs.Bool("f", false, "follow the log until the container ends")
	previous := fs.Bool("previous", false, "the previous instance's log")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("usage: podvisor logs NAME [-c CONTAINER] [-f] [--previous]")
	}
	c := newClient(*cf.socket)
	p, err := findPod(ctx, c, *cf.namespace, pos[0])
	if err != nil {
		return err
	}
	err = c.Log(ctx, p.Namespace, p.Name, *container, *previous, *follow, out)
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a followed log quietly, as kubectl's does
	}
	return err
}

func cmdDescribe(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	cf := addClientFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || (pos[0] != "pod" && pos[0] != "pods" && pos[0] != "po") {
		return fmt.Errorf("usage: podvisor describe pod NAME")
	}
	c := newClient(*cf.socket)
	p, err := findPod(ctx, c, *cf.namespace, pos[1])
	if err != nil {
		return err
	}
	events, err := c.Events(ctx, p.Namespace, p.Name)
	if err != nil {
		return err
	}
	describe(out, p, events, time.Now())
	return nil
}

func describe(out io.Writer, p *v1.Pod, events []api.Event, now time.Time) {
	w := tabwriter.NewWriter(out, 0, 8, 1, ' ', 0)
	field := func(indent int, name, value string) {
		fmt.Fprintf(w, "%s%s:\t%s\n", strings.Repeat("  ", indent), name, value)
	}
	field(0, "Name", p.Name)
	field(0, "Namespace", p.Namespace)
	field(0, "Node", orNone(p.Spec.NodeName))
	if p.Status.StartTime != nil {
		field(0, "Start Time", p.Status.StartTime.Format(time.RFC1123Z))
	}
	field(0, "Labels", mapLines(p.Labels))
	field(0, "Annotations", mapLines(p.Annotations))
	field(0, "Status", podrow.Of(p, now).Status)
	if p.Status.Message != "" {
		field(0, "Message", p.Status.Message)
	}
	field(0, "IP", orNone(p.Status.PodIP))
	if p.Spec.RuntimeClassName != nil {
		field(0, "Runtime Class Name", *p.Spec.RuntimeClassName)
	}
	statuses := map[string]v1.ContainerStatus{}
	for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		statuses[cs.Name] = cs
	}
	describeContainers(w, "Init Containers", p.Spec.InitContainers, statuses)
	describeContainers(w, "Containers", p.Spec.Containers, statuses)
	if len(p.Status.Conditions) > 0 {
		fmt.Fprintln(w, "Conditions:\n  Type\tStatus")
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(w, "  %s\t%s\n", c.Type, c.Status)
		}
	}
	if p.Status.QOSClass != "" {
		field(0, "QoS Class", string(p.Status.QOSClass))
	}
	w.Flush()
	describeEvents(out, events, now)
}

func describeContainers(w io.Writer, title string, specs []v1.Container, statuses map[string]v1.ContainerStatus) {
	if len(specs) == 0 {
		return
	}
	field := func(indent int, name, value string) {
		fmt.Fprintf(w, "%s%s:\t%s\n", strings.Repeat("  ", indent), name, value)
	}
	fmt.Fprintln(w, title+":")
	for _, c := range specs {
		cs := statuses[c.Name]
		fmt.Fprintf(w, "  %s:\n", c.Name)
		if c.RestartPolicy != nil {
			field(2, "Restart Policy", string(*c.RestartPolicy))
		}
		field(2, "Container ID", orNone(cs.ContainerID))
		field(2, "Image", c.Image)
		if len(c.Command) > 0 {
			field(2, "Command", strings.Join(c.Command, " "))
		}
		if len(c.Args) > 0 {
			field(2, "Args", strings.Join(c.Args, " "))
		}
		describeState(w, "State", cs.State)
		if cs.LastTerminationState.Terminated != nil {
			describeState(w, "Last State", cs.LastTerminationState)
		}
		field(2, "Ready", fmt.Sprint(cs.Ready))
		field(2, "Restart Count", fmt.Sprint(cs.RestartCount))
		describeEnvFrom(w, c.EnvFrom)
		if len(c.Env) > 0 {
			fmt.Fprintln(w, "    Environment:")
			for _, e := range c.Env {
				field(3, e.Name, envSource(e))
			}
		}
	}
}

func describeState(w io.Writer, label string, s v1.ContainerState) {
	switch {
	case s.Running != nil:
		fmt.Fprintf(w, "    %s:\tRunning\n      Started:\t%s\n", label, s.Running.StartedAt.Format(time.RFC1123Z))
	case s.Waiting != nil:
		fmt.Fprintf(w, "    %s:\tWaiting\n      Reason:\t%s\n", label, s.Waiting.Reason)
		if s.Waiting.Message != "" {
			fmt.Fprintf(w, "      Message:\t%s\n", s.Waiting.Message)
		}
	case s.Terminated != nil:
		t := s.Terminated
		fmt.Fprintf(w, "    %s:\tTerminated\n      Reason:\t%s\n", label, t.Reason)
		if t.Message != "" {
			fmt.Fprintf(w, "      Message:\t%s\n", t.Message)
		}
		fmt.Fprintf(w, "      Exit Code:\t%d\n", t.ExitCode)
		if t.Signal != 0 {
			fmt.Fprintf(w, "      Signal:\t%d\n", t.Signal)
		}
		fmt.Fprintf(w, "      Started:\t%s\n      Finished:\t%s\n",
			t.StartedAt.Format(time.RFC1123Z), t.FinishedAt.Format(time.RFC1123Z))
	default:
		fmt.Fprintf(w, "    %s:\tUnknown\n", label)
	}
}

func describeEvents(out io.Writer, events []api.Event, now time.Time) {
	if len(events) == 0 {
		fmt.Fprintln(out, "Events:  <none>")
		return
	}
	fmt.Fprintln(out, "Events:")
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  Type\tReason\tAge\tFrom\tMessage")
	fmt.Fprintln(w, "  ----\t------\t----\t----\t-------")
	for _, e := range events {
		age := duration.HumanDuration(now.Sub(e.LastTime))
		if e.Count > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, e.Count, duration.HumanDuration(now.Sub(e.FirstTime)))
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, age, "podvisor", e.Message)
	}
	w.Flush()
}

func mapLines(m map[string]string) string {
	if len(m) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = k + "=" + m[k]
	}
	return strings.Join(lines, "\n\t")
}

// cmdTop samples usage twice, a second apart, and prints CPU as the rate
// over that second, as kubectl top shows a rate.
func cmdTop(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	cf := addClientFlags(fs)
	containers := fs.Bool("containers", false, "show each container")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "pods" && pos[0] != "pod" && pos[0] != "po") {
		return fmt.Errorf("usage: podvisor top pods [--containers]")
	}
	c := newClient(*cf.socket)
	first, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	second, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	before := map[string]api.PodStats{}
	for _, p := range first {
		before[p.Namespace+"/"+p.Name] = p
	}
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	if *containers {
		fmt.Fprintln(w, "POD\tNAME\tCPU(cores)\tMEMORY(bytes)\tTASKS")
	} else {
		fmt.Fprintln(w, "NAME\tCPU(cores)\tMEMORY(bytes)\tTASKS\tNET-IN(bytes)\tNET-OUT(bytes)")
	}
	for _, p := range second {
		if *cf.namespace != "" && p.Namespace != *cf.namespace {
			continue
		}
		prev, ok := before[p.Namespace+"/"+p.Name]
		if !*containers {
			in, out := netTotals(p.Net)
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", p.Name, cpuRate(prev.Usage, p.Usage, prev.Time, p.Time, ok),
				memory(p.Usage.MemoryWorkingSet), p.Usage.Tasks, in, out)
			continue
		}
		prevC := map[string]api.Usage{}
		for _, c := range prev.Containers {
			prevC[c.Name] = c.Usage
		}
		for _, c := range p.Containers {
			u, had := prevC[c.Name]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", p.Name, c.Name, cpuRate(u, c.Usage, prev.Time, p.Time, had),
				memory(c.Usage.MemoryWorkingSet), c.Usage.Tasks)
		}
	}
	return w.Flush()
}

func cpuRate(a, b api.Usage, ta, tb time.Time, ok bool) string {
	if !ok || !tb.After(ta) || b.CPUNanos < a.CPUNanos {
		return "<unknown>"
	}
	milli := float64(b.CPUNanos-a.CPUNanos) / float64(tb.Sub(ta).Nanoseconds()) * 1000
	return fmt.Sprintf("%dm", int64(milli+0.5))
}

func memory(b uint64) string { return fmt.Sprintf("%dMi", b>>20) }

// netTotals are the pod's bytes received and sent since counting began,
// in MEMORY's unit; "-" when nothing counts the pod (no eBPF, no veth).
// The counters are per pod, so --containers leaves them out.
func netTotals(n *api.NetStats) (in, out string) {
	if n == nil {
		return "-", "-"
	}
	return memory(n.RxBytes), memory(n.TxBytes)
}
