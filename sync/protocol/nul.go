package protocol

import (
	"bytes"
	"fmt"
)

// FindNUL returns the offset in the JSON text data of the first NUL
// character, raw or escaped as \u0000 (the only escape JSON has for it),
// or -1 when there is none. A \u0000 preceded by an escaped backslash
// (\\u0000) is text, not a NUL. PostgreSQL's jsonb and TEXT refuse NUL,
// so a document holding one would make the hub's store fail: the hub's
// every entrance refuses it instead.
func FindNUL(data []byte) int {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return i
	}
	const esc = `\u0000`
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte(esc))
		if i < 0 {
			return -1
		}
		i += off
		// The backslash starts an escape when the run of backslashes
		// ending at it is odd: the ones before it pair up as \\.
		run := 1
		for j := i - 1; j >= 0 && data[j] == '\\'; j-- {
			run++
		}
		if run%2 == 1 {
			return i
		}
		off = i + len(esc)
	}
}

// refuseNUL is FindNUL's refusal of a document of a kind.
func refuseNUL(what string, data []byte) error {
	if i := FindNUL(data); i >= 0 {
		return fmt.Errorf("%s: a NUL character (\\u0000) at byte %d: no field may hold one", what, i)
	}
	return nil
}
