package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
)

// objectPath is the API's name of a ConfigMap or Secret kind as the CLI
// takes it, kubectl's short names included; "" for another kind.
func objectPath(kind string) string {
	switch kind {
	case "configmaps", "configmap", "cm":
		return "configmaps"
	case "secrets", "secret":
		return "secrets"
	}
	return ""
}

func objectURL(path, ns, name string) string {
	return "/v1/objects/" + path + "/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

// secretsOmitted heads a Secret printed as YAML: podhub never prints a
// Secret's values (describe secret lists its keys and their sizes).
const secretsOmitted = "# podhub prints no Secret's data: its values are omitted (podhub describe secret NAME lists its keys and sizes)\n"

// getObjects is get configmaps|secrets [NAME] [-n NS | -A] [-o json|yaml]
// with kubectl's columns: NAME DATA AGE, NAME TYPE DATA AGE, NAMESPACE
// first with -A.
func (c *cli) getObjects(kind, name, ns string, all bool, output string, now time.Time) error {
	path := objectPath(kind)
	var items []api.ObjectItem
	if name != "" {
		var d api.ObjectDetail
		if err := c.client().Do("GET", objectURL(path, ns, name), nil, &d); err != nil {
			return err
		}
		items = []api.ObjectItem{{Entry: d.Entry, Object: d.Object}}
	} else {
		q := url.Values{}
		if !all {
			q.Set("namespace", ns)
		}
		if output != "" {
			q.Set("objects", "true")
		}
		if err := c.client().Do("GET", "/v1/objects/"+path+"?"+q.Encode(), nil, &items); err != nil {
			return err
		}
	}
	if output != "" {
		return c.printObjects(path, items, name != "", output)
	}
	if len(items) == 0 {
		where := "in " + ns + " namespace"
		if all {
			where = "in any namespace"
		}
		fmt.Fprintf(c.errOut, "No resources found %s.\n", where)
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	head := "NAME\tDATA\tAGE"
	if path == "secrets" {
		head = "NAME\tTYPE\tDATA\tAGE"
	}
	if all {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(w, head)
	for _, it := range items {
		var cols []string
		if all {
			cols = append(cols, it.Namespace)
		}
		cols = append(cols, it.Name)
		if path == "secrets" {
			cols = append(cols, string(it.Type))
		}
		cols = append(cols, fmt.Sprint(it.Keys), ago(now, it.Created))
		fmt.Fprintln(w, strings.Join(cols, "\t"))
	}
	return w.Flush()
}

// printObjects prints the objects (one, or the list as the hub's other
// lists print: an array), a Secret's without its data.
func (c *cli) printObjects(path string, items []api.ObjectItem, one bool, output string) error {
	if path == "secrets" && output == "yaml" {
		fmt.Fprint(c.out, secretsOmitted)
	}
	if one && len(items) == 1 {
		return printObject(c, items[0].Object, output)
	}
	objs := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		objs = append(objs, it.Object)
	}
	return printObject(c, objs, output)
}

func (c *cli) describeObject(kind, name, ns string) error {
	path := objectPath(kind)
	var d api.ObjectDetail
	if err := c.client().Do("GET", objectURL(path, ns, name), nil, &d); err != nil {
		return err
	}
	if path == "secrets" {
		var s v1.Secret
		if err := json.Unmarshal(d.Object, &s); err != nil {
			return err
		}
		return describeSecret(c.out, &s, d.Sizes)
	}
	var cm v1.ConfigMap
	if err := json.Unmarshal(d.Object, &cm); err != nil {
		return err
	}
	if err := describeConfigMap(c.out, &cm); err != nil {
		return err
	}
	return describeWorkloadEvents(c.out, d.Events, time.Now())
}

// describeConfigMap is kubectl describe configmap without its events:
// each value of data in full, binaryData's sizes.
func describeConfigMap(out io.Writer, cm *v1.ConfigMap) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	describeObjectMeta(w, cm.Name, cm.Namespace, cm.Labels, cm.Annotations)
	fmt.Fprint(w, "\nData\n====\n")
	for _, k := range sortedKeys(cm.Data) {
		fmt.Fprintf(w, "%s:\n----\n%s\n\n", k, cm.Data[k])
	}
	fmt.Fprint(w, "\nBinaryData\n====\n")
	for _, k := range sortedKeys(cm.BinaryData) {
		fmt.Fprintf(w, "%s: %d bytes\n", k, len(cm.BinaryData[k]))
	}
	fmt.Fprint(w, "\n")
	return w.Flush()
}

// describeSecret is kubectl describe secret, every value by its size only
// (kubectl shows a service account token's; podhub shows none).
func describeSecret(out io.Writer, s *v1.Secret, sizes map[string]int) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	describeObjectMeta(w, s.Name, s.Namespace, s.Labels, s.Annotations)
	fmt.Fprintf(w, "\nType:\t%s\n", s.Type)
	fmt.Fprint(w, "\nData\n====\n")
	for _, k := range sortedKeys(sizes) {
		fmt.Fprintf(w, "%s:\t%d bytes\n", k, sizes[k])
	}
	return w.Flush()
}

// describeObjectMeta writes kubectl's Name, Namespace, Labels (one a
// line) and Annotations (one a line, a long or multi-line value under
// its key, shortened; kubectl's last-applied annotation skipped).
func describeObjectMeta(w io.Writer, name, ns string, labels, annotations map[string]string) {
	fmt.Fprintf(w, "Name:\t%s\n", name)
	fmt.Fprintf(w, "Namespace:\t%s\n", ns)
	fmt.Fprint(w, "Labels:\t")
	if len(labels) == 0 {
		fmt.Fprintln(w, "<none>")
	}
	for i, k := range sortedKeys(labels) {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprintf(w, "%s=%s\n", k, labels[k])
	}
	fmt.Fprint(w, "Annotations:\t")
	var keys []string
	for _, k := range sortedKeys(annotations) {
		if k != v1.LastAppliedConfigAnnotation {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		fmt.Fprintln(w, "<none>")
	}
	const maxAnnotationLen = 140
	for i, k := range keys {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		value := strings.TrimSuffix(annotations[k], "\n")
		if len(value)+len(k)+2 > maxAnnotationLen || strings.Contains(value, "\n") {
			fmt.Fprintf(w, "%s:\n", k)
			for _, line := range strings.Split(value, "\n") {
				if len(line) > maxAnnotationLen-2 {
					line = line[:maxAnnotationLen-2] + "..."
				}
				fmt.Fprintf(w, "\t  %s\n", line)
			}
		} else {
			fmt.Fprintf(w, "%s: %s\n", k, value)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// deleteObject deletes a ConfigMap or Secret; pods that use it keep
// running and find it missing, as in Kubernetes.
func (c *cli) deleteObject(kind, name, ns string) error {
	path := objectPath(kind)
	if err := c.client().Do("DELETE", objectURL(path, ns, name), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s %q deleted from %s namespace\n", strings.TrimSuffix(path, "s"), name, ns)
	return nil
}
