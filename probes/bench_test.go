package probes

import (
	"context"
	"net"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/test/listenserver"
)

func BenchmarkTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go listenserver.AcceptAndClose(ln)
	a := &v1.TCPSocketAction{Port: intstr.FromInt32(int32(ln.Addr().(*net.TCPAddr).Port))}
	b.ReportAllocs()
	for b.Loop() {
		if err := TCP(context.Background(), target, a, time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
