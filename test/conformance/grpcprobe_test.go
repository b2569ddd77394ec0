package conformance

// podvisor's gRPC probe is written by hand over HTTP/2 (probes.GRPC);
// the kubelet's uses grpc-go. This checks the hand-written one against
// grpc-go's own health server, as the kubelet's would see it: plaintext,
// the probe's service name in the request, SERVING the only success.

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/probes"
)

// grpcHealthServer serves grpc-go's health service on a loopback port
// until the test ends; without health, the server has no health service.
func grpcHealthServer(t *testing.T, hs *health.Server) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	if hs != nil {
		healthpb.RegisterHealthServer(gs, hs)
	}
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	return l.Addr().(*net.TCPAddr).Port
}

func TestGRPCProbeAgainstGRPCGoHealthServer(t *testing.T) {
	hs := health.NewServer() // "" is SERVING
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("draining", healthpb.HealthCheckResponse_NOT_SERVING)
	port := grpcHealthServer(t, hs)
	noHealth := grpcHealthServer(t, nil)
	closed := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}()

	for _, tc := range []struct {
		name    string
		port    int
		service *string
		wantErr string // "" for success
	}{
		{"no service name: the server's overall health", port, nil, ""},
		{"empty service name", port, ptr(""), ""},
		{"a serving service", port, ptr("liveness"), ""},
		{"a service not serving", port, ptr("draining"), "NOT_SERVING"},
		{"a service the server does not know", port, ptr("unknown"), "code = 5"}, // NotFound
		{"a server without the health service", noHealth, nil, "code = 12"},      // Unimplemented
		{"nothing listening", closed, nil, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := probes.GRPC(context.Background(), probes.Target{Host: "127.0.0.1"},
				&v1.GRPCAction{Port: int32(tc.port), Service: tc.service}, 5*time.Second)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("probe failed against a SERVING grpc-go health server: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("probe succeeded, want a failure with %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("probe error %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}

	// The status changes while the server runs: the next probe sees it.
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := probes.GRPC(context.Background(), probes.Target{Host: "127.0.0.1"},
		&v1.GRPCAction{Port: int32(port), Service: ptr("liveness")}, 5*time.Second); err == nil {
		t.Fatal("probe succeeded after the service turned NOT_SERVING")
	}
}
