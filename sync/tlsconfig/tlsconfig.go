// Package tlsconfig builds the TLS client configuration devices and the
// hub use to reach an MQTT broker: the broker's CA, and a client
// certificate when the broker wants one.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client reads the CA file (optional: the system's roots otherwise) and
// the certificate and key files (both or neither).
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	t := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca %s: no certificate in it", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: cert and key go together")
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		t.Certificates = []tls.Certificate{c}
	}
	return t, nil
}
