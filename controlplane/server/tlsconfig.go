package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// httpTLSConfig is the HTTP listener's TLS; nil without a certificate,
// when it serves plain HTTP.
func httpTLSConfig(t HTTPTLSConfig) (*tls.Config, error) {
	if t.Cert == "" && t.Key == "" {
		return nil, nil
	}
	if t.Cert == "" || t.Key == "" {
		return nil, errors.New("httpTls needs both cert and key")
	}
	pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("httpTls: loading the certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// tlsCredentials builds the API's TLS; nil without a certificate.
func tlsCredentials(t TLSConfig) (credentials.TransportCredentials, error) {
	if t.Cert == "" && t.Key == "" {
		if t.ClientCA != "" {
			return nil, errors.New("tls.clientCa needs tls.cert and tls.key")
		}
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the server certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", t.ClientCA)
		}
		cfg.ClientCAs = pool
		// Verify a certificate when one is sent; a client without one may
		// still authenticate with a bearer token.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return credentials.NewTLS(cfg), nil
}
