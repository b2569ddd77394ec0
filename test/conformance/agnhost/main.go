// Command agnhost stands in for the Kubernetes e2e agnhost commands
// that busybox cannot replace in the conformance port: a gRPC health
// server, an HTTPS request logger and mounttest. It is static, so the conformance
// suite runs it directly for process pods and copies it into the
// side-loaded busybox image for containerd pods.
//
//	agnhost grpc-health-checking [--port 5000] [--http-port 8080] [--service S] [--delay-unhealthy-sec -1]
//	agnhost netexec [--http-port 8080] [--https]
//	agnhost mounttest [--file_content=P] [--file_mode=P] [--file_content_in_loop=P ...]
//
// grpc-health-checking serves grpc.health.v1.Health (google.golang.org/grpc's
// own health server) in plaintext, as upstream's agnhost: SERVING for the
// service named by --service (and for ""), NOT_SERVING once
// --delay-unhealthy-sec have passed (never if negative, at once if 0). Its
// HTTP control port takes /make-serving and /make-not-serving.
//
// netexec logs the method and URI of every request, as upstream's tests
// read them from its log ("GET /echo?msg=poststart"), and answers /echo
// with the msg parameter. --https serves TLS with a self-signed
// certificate made at start (upstream mounts localhost.crt/.key): the
// kubelet's https hooks and probes do not verify certificates.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	log.SetOutput(os.Stdout)
	log.SetFlags(log.LstdFlags)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: agnhost grpc-health-checking|netexec|mounttest [flags]")
		os.Exit(2)
	}
	// PID 1 of a container gets no default SIGTERM action: exit on it.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "grpc-health-checking":
		err = grpcHealthChecking(ctx, os.Args[2:])
	case "netexec":
		err = netexec(ctx, os.Args[2:])
	case "mounttest":
		mounttest(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (grpc-health-checking, netexec, mounttest)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agnhost:", err)
		os.Exit(1)
	}
}

func grpcHealthChecking(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("grpc-health-checking", flag.ContinueOnError)
	port := fs.Int("port", 5000, "gRPC port")
	httpPort := fs.Int("http-port", 8080, "HTTP control port")
	service := fs.String("service", "", "the service this endpoint answers for")
	delayUnhealthy := fs.Int("delay-unhealthy-sec", -1, "seconds of SERVING before NOT_SERVING; negative: always SERVING")
	if err := fs.Parse(args); err != nil {
		return err
	}
	hs := health.NewServer()
	setStatus := func(s healthpb.HealthCheckResponse_ServingStatus) {
		log.Printf("health status of %q: %v", *service, s)
		hs.SetServingStatus(*service, s)
	}
	if *delayUnhealthy == 0 {
		setStatus(healthpb.HealthCheckResponse_NOT_SERVING)
	} else {
		setStatus(healthpb.HealthCheckResponse_SERVING)
	}
	if *delayUnhealthy > 0 {
		time.AfterFunc(time.Duration(*delayUnhealthy)*time.Second, func() { setStatus(healthpb.HealthCheckResponse_NOT_SERVING) })
	}

	l, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	mux := http.NewServeMux()
	mux.HandleFunc("/make-serving", func(w http.ResponseWriter, _ *http.Request) {
		setStatus(healthpb.HealthCheckResponse_SERVING)
	})
	mux.HandleFunc("/make-not-serving", func(w http.ResponseWriter, _ *http.Request) {
		setStatus(healthpb.HealthCheckResponse_NOT_SERVING)
	})
	control := &http.Server{Addr: ":" + strconv.Itoa(*httpPort), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(l) }()
	go func() { errs <- control.ListenAndServe() }()
	log.Printf("serving gRPC health on :%d, control on :%d", *port, *httpPort)
	select {
	case <-ctx.Done():
		gs.Stop()
		control.Close()
		return nil
	case err := <-errs:
		return err
	}
}

func netexec(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("netexec", flag.ContinueOnError)
	port := fs.Int("http-port", 8080, "HTTP port")
	https := fs.Bool("https", false, "serve HTTPS with a self-signed certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.FormValue("msg"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s", r.Method, r.URL.RequestURI())
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: logged, ReadHeaderTimeout: 5 * time.Second}
	// Listen before saying so: a test waits for the line.
	l, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	errs := make(chan error, 1)
	if *https {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		go func() { errs <- srv.ServeTLS(l, "", "") }()
	} else {
		go func() { errs <- srv.Serve(l) }()
	}
	log.Printf("serving on :%d (https: %v)", *port, *https)
	select {
	case <-ctx.Done():
		srv.Close()
		return nil
	case err := <-errs:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// selfSigned makes a certificate for localhost, valid for a day.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
