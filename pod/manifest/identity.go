package manifest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations podvisor sets on every pod.
const (
	// AnnotationSource is "file" or "hub".
	AnnotationSource = "podvisor.io/source"
	// AnnotationFile names the manifest file a file pod came from.
	AnnotationFile = "podvisor.io/manifest"
	// AnnotationHash is the content hash the UID derives from.
	AnnotationHash = "podvisor.io/config-hash"
)

// Source values.
const (
	SourceFile = "file"
	SourceHub  = "hub"
)

// Stamp gives a decoded pod its identity: a UID derived from the source and
// the pod's content (same content, same UID; any change, a new instance),
// and the podvisor annotations. The file path is recorded but not hashed,
// so renaming a manifest does not restart its pod.
func Stamp(p *v1.Pod, source, file string) {
	p.UID = ""
	delete(p.Annotations, AnnotationSource)
	delete(p.Annotations, AnnotationFile)
	delete(p.Annotations, AnnotationHash)
	content, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("marshal decoded pod: %v", err)) // a decoded v1.Pod always marshals
	}
	h := sha256.New()
	h.Write([]byte(source))
	h.Write([]byte{0})
	h.Write(content)
	sum := h.Sum(nil)
	p.UID = types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]))
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationSource] = source
	p.Annotations[AnnotationHash] = fmt.Sprintf("%x", sum[:16])
	if file != "" {
		p.Annotations[AnnotationFile] = file
	}
}
