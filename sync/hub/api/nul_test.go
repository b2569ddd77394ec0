package api

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// A request body holding a NUL in a string is refused before it is
// decoded: the hub's store (PostgreSQL) cannot keep one.
func TestDecodeBodyRefusesNUL(t *testing.T) {
	var v struct {
		Labels map[string]string `json:"labels"`
	}
	req := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{"labels":{"a":"b\u0000"}}`))
	if err := decodeBody(req, &v); err == nil || !strings.Contains(err.Error(), "request body: a NUL character") {
		t.Fatalf("body with a NUL: got %v, want a refusal of the NUL", err)
	}
	req = httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{"labels":{"a":"b\\u0000"}}`))
	if err := decodeBody(req, &v); err != nil || v.Labels["a"] != `b\u0000` {
		t.Fatalf("body with the text \\u0000: got %v, %q", err, v.Labels["a"])
	}
}
