package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkHandshakeAndSend is a device connecting to its broker: a TLS
// handshake (ECDSA P-256 server certificate checked against the CA file)
// then a 2 KiB status message sent and read by the server.
func BenchmarkHandshakeAndSend(b *testing.B) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"broker"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	ca := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
	client, err := Client(ca, "", "", "broker")
	if err != nil {
		b.Fatal(err)
	}
	server := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	msg := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		cc, sc := net.Pipe()
		done := make(chan error, 1)
		go func() {
			defer sc.Close() // not the TLS close: net.Pipe would block on its alert
			_, err := io.ReadFull(tls.Server(sc, server), make([]byte, len(msg)))
			done <- err
		}()
		c := tls.Client(cc, client)
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		cc.Close()
	}
}
