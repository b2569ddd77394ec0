package kubeapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// benchServer is an API over 1,000 devices with 10 pods each (10,000
// pods, as make bench's simulated fleet), filled without a database.
func benchServer(b *testing.B) *Server {
	s := New(Config{Now: func() time.Time { return t0 }})
	s.start.Do(func() {}) // no refresher: the store is filled here
	for d := 0; d < 1000; d++ {
		dev := fmt.Sprintf("dev%04d", d)
		var objs []*object
		for i := 0; i < 10; i++ {
			p := filePod(fmt.Sprintf("app%d", i), int32(i))
			p.Spec.NodeName = dev
			objs = append(objs, podObject(p, dev, false))
		}
		s.store.replace(resPods, dev, objs)
	}
	return s
}

// BenchmarkListPods measures kubectl get pods -A: a Table of 10,000
// pods in chunks of 500 (kubectl's), and the same as plain JSON.
func BenchmarkListPods(b *testing.B) {
	s := benchServer(b)
	for _, c := range []struct{ name, accept string }{{"table", tableAccept}, {"json", "application/json"}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				path, pages := "/api/v1/pods?limit=500", 0
				for path != "" {
					req := httptest.NewRequest(http.MethodGet, path, nil)
					req.Header.Set("Accept", c.accept)
					rec := httptest.NewRecorder()
					s.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
					pages++
					path = nextPage(rec.Body.Bytes())
				}
				if pages != 20 {
					b.Fatalf("%d pages", pages)
				}
			}
		})
	}
}

// nextPage is the path of a list's next chunk, "" after the last.
func nextPage(body []byte) string {
	var l struct {
		Metadata struct{ Continue string } `json:"metadata"`
	}
	jsonUnmarshal(body, &l)
	if l.Metadata.Continue == "" {
		return ""
	}
	return "/api/v1/pods?limit=500&continue=" + l.Metadata.Continue
}
