package kinds

import (
	"strings"
	"testing"
)

// An applied object holding a NUL in any string is refused, naming the
// file, the document and the object: PostgreSQL cannot store it. The
// text "\\u0000" (a backslash, then u0000) is no NUL and passes.
func TestDecodeRefusesNUL(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: %s\n"
	for _, v := range []string{`"a\0b"`, `"a\x00b"`, `"a\u0000b"`} {
		_, err := Decode("f.yaml", []byte(strings.Replace(cm, "%s", v, 1)))
		if err == nil || !strings.Contains(err.Error(), `f.yaml: document 1: ConfigMap "c": a string holds a NUL character`) {
			t.Errorf("ConfigMap data %s: got %v, want a refusal of the NUL naming the object", v, err)
		}
	}
	if _, err := Decode("f.yaml", []byte(strings.Replace(cm, "%s", `'a\u0000b'`, 1))); err != nil {
		t.Errorf("ConfigMap data holding the text \\u0000: %v", err)
	}
}
