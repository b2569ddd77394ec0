// Package manifest turns files of Kubernetes v1.Pod manifests into
// validated, defaulted pods with content-derived UIDs, and watches a
// directory of them.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/pod/objects"
)

// MaxFileSize is the largest manifest file read, as in the kubelet.
const MaxFileSize = 10 << 20

// Decode parses every document of a manifest file into pods, strictly:
// unknown or duplicate fields, wrong types and unparsable quantities are
// errors naming the document, the pod and the field. Pods are validated and
// defaulted but not yet given a UID or source annotations. ConfigMap and
// Secret documents are skipped (DecodeContents reads them).
func Decode(data []byte) ([]*v1.Pod, error) {
	c, err := DecodeContents(data)
	return c.Pods, err
}

// Contents is what a manifest file holds: pods, and the ConfigMaps and
// Secrets its directory gives its static pods.
type Contents struct {
	Pods    []*v1.Pod
	Objects []*objects.Object
	// ObjectErrors are the object documents refused; each stands alone,
	// so the file's other documents are kept.
	ObjectErrors []ObjectError
	// ObjectsRead: every document could be read as YAML, so Objects are
	// all the file's valid objects (a file that cannot be split says
	// nothing of them).
	ObjectsRead bool
}

// DecodeContents parses every document of a manifest file: the pods as
// Decode does (any bad pod document refuses the file's pods, with the
// error), the objects one by one.
func DecodeContents(data []byte) (Contents, error) {
	var c Contents
	if len(data) > MaxFileSize {
		return c, fmt.Errorf("file is %d bytes, larger than the %d byte limit", len(data), MaxFileSize)
	}
	docs, err := SplitDocuments(data, 0)
	if err != nil {
		return c, err
	}
	var pods []*v1.Pod
	var podErr error
	defined := map[objects.Ref]int{}
	for i, doc := range docs {
		where := ""
		if len(docs) > 1 {
			where = fmt.Sprintf("document %d: ", i+1)
		}
		js, head, err := decodeHead(doc)
		if err != nil {
			return Contents{}, fmt.Errorf("%s%w", where, err)
		}
		if isObjectKind(head.APIVersion, head.Kind) {
			ref := objects.Ref{Kind: objects.Kind(head.Kind), Namespace: head.Metadata.Namespace, Name: head.Metadata.Name}
			if ref.Namespace == "" {
				ref.Namespace = "default"
			}
			o, err := decodeObject(head.Kind, head.Metadata.Name, js)
			if err == nil {
				if first, dup := defined[o.Ref]; dup {
					err = fmt.Errorf("%s %s/%s is already defined in document %d", o.Kind, o.Namespace, o.Name, first)
				}
			}
			if err != nil {
				c.ObjectErrors = append(c.ObjectErrors, ObjectError{Ref: ref, Err: fmt.Errorf("%s%w", where, err)})
				continue
			}
			defined[o.Ref] = i + 1
			c.Objects = append(c.Objects, o)
			continue
		}
		if podErr != nil {
			continue
		}
		p, err := decodePod(js, head)
		if err == nil {
			SetDefaults(p)
			if errs := Validate(p); len(errs) > 0 {
				err = fmt.Errorf("pod %q: %w", p.Name, errs.ToAggregate())
			}
		}
		if err != nil {
			podErr = fmt.Errorf("%s%w", where, err)
			continue
		}
		pods = append(pods, p)
	}
	c.ObjectsRead = true
	if podErr != nil {
		return c, podErr
	}
	c.Pods = pods
	return c, nil
}

// SplitDocuments returns the non-empty documents of a YAML stream (a JSON
// file is one document). With max > 0 it stops reading after max+1, so a
// caller bounding the count sees that it was passed without reading on.
func SplitDocuments(data []byte, max int) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("splitting YAML documents: %w", err)
		}
		if isBlank(doc) {
			continue
		}
		docs = append(docs, doc)
		if max > 0 && len(docs) > max {
			return docs, nil
		}
	}
}

// isBlank reports whether a document holds only whitespace and comments.
func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && line != "---" {
			return false
		}
	}
	return true
}

// docHead is what every document says of itself.
type docHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// decodeHead turns a document into JSON and reads its head.
func decodeHead(doc []byte) ([]byte, docHead, error) {
	var head docHead
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, head, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &head); err != nil {
		return nil, head, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	return js, head, nil
}

func decodePod(js []byte, head docHead) (*v1.Pod, error) {
	if head.Kind != "Pod" || head.APIVersion != "v1" {
		return nil, fmt.Errorf("apiVersion %q kind %q: only apiVersion v1, kind Pod, ConfigMap or Secret is accepted", head.APIVersion, head.Kind)
	}
	named := fmt.Sprintf("pod %q: ", head.Metadata.Name)
	if err := checkQuantities(js); err != nil {
		return nil, fmt.Errorf("%s%w", named, err)
	}
	var p v1.Pod
	strict, err := kjson.UnmarshalStrict(js, &p)
	if err != nil {
		return nil, fmt.Errorf("%s%s", named, describeJSONError(err))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s%s", named, strings.Join(msgs, "; "))
	}
	return &p, nil
}

// describeJSONError rewrites the decoder's "cannot unmarshal X into Go
// struct field T.a.b of type Y" as "a.b: expected Y, got X", the JSON path
// users wrote, without Go type names.
func describeJSONError(err error) string {
	msg := err.Error()
	var got, path, want string
	i := strings.Index(msg, "cannot unmarshal ")
	j := strings.Index(msg, " into Go struct field ")
	k := strings.LastIndex(msg, " of type ")
	if i < 0 || j < i || k < j {
		return msg
	}
	got = msg[i+len("cannot unmarshal ") : j]
	path = msg[j+len(" into Go struct field ") : k]
	want = msg[k+len(" of type "):]
	var parts []string
	for n, seg := range strings.Split(path, ".") {
		// The first segment is the Go type; capitalised ones are embedded
		// Go structs (ProbeHandler) that have no JSON name.
		if n == 0 || seg == "" || (seg[0] >= 'A' && seg[0] <= 'Z') {
			continue
		}
		parts = append(parts, seg)
	}
	return fmt.Sprintf("%s: expected %s, got %s", strings.Join(parts, "."), want, got)
}

// checkQuantities parses every resource quantity with its path, because the
// typed decoder's quantity errors do not say which field was wrong.
func checkQuantities(js []byte) error {
	var raw struct {
		Spec struct {
			Containers     []rawContainer      `json:"containers"`
			InitContainers []rawContainer      `json:"initContainers"`
			Overhead       map[string]any      `json:"overhead"`
			Resources      *rawResourceSection `json:"resources"`
		} `json:"spec"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &raw); err != nil {
		return nil // the typed decode reports shape errors with better context
	}
	check := func(path string, list map[string]any) error {
		for name, v := range list {
			s := fmt.Sprint(v)
			if _, err := resource.ParseQuantity(s); err != nil {
				return fmt.Errorf("%s[%s]: Invalid value: %q: %v", path, name, s, err)
			}
		}
		return nil
	}
	for kind, cs := range map[string][]rawContainer{"containers": raw.Spec.Containers, "initContainers": raw.Spec.InitContainers} {
		for i, c := range cs {
			for section, list := range map[string]map[string]any{"limits": c.Resources.Limits, "requests": c.Resources.Requests} {
				if err := check(fmt.Sprintf("spec.%s[%d].resources.%s", kind, i, section), list); err != nil {
					return err
				}
			}
		}
	}
	if err := check("spec.overhead", raw.Spec.Overhead); err != nil {
		return err
	}
	if r := raw.Spec.Resources; r != nil {
		if err := check("spec.resources.limits", r.Limits); err != nil {
			return err
		}
		return check("spec.resources.requests", r.Requests)
	}
	return nil
}

type rawResourceSection struct {
	Limits   map[string]any `json:"limits"`
	Requests map[string]any `json:"requests"`
}

type rawContainer struct {
	Resources rawResourceSection `json:"resources"`
}
