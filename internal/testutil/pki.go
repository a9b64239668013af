package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKIFiles are the PEM files WritePKI wrote: a CA, a server certificate for
// 127.0.0.1 with its key, and a client certificate with its key.
type PKIFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// WritePKI writes a throwaway CA (valid for an hour either side of now), a
// server certificate for 127.0.0.1 and a client certificate whose common
// name is clientCN, as PEM files in dir (ca.crt, server.crt/.key,
// client.crt/.key, mode 0600). Tests of TLS clients and servers (the CLI's
// and bc-mcp's API dial, the server's listeners) share it.
func WritePKI(t testing.TB, dir, clientCN string) PKIFiles {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("writing a test PKI: %v", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDER)
	must(err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	issue := func(name string, serial int64, tmpl *x509.Certificate) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		must(err)
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		must(err)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", kb)
	}
	var f PKIFiles
	f.CA = write("ca.crt", "CERTIFICATE", caDER)
	f.ServerCert, f.ServerKey = issue("server", 2, &x509.Certificate{Subject: pkix.Name{CommonName: "server"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
	f.ClientCert, f.ClientKey = issue("client", 3, &x509.Certificate{Subject: pkix.Name{CommonName: clientCN},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return f
}
