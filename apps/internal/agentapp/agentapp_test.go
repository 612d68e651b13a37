package agentapp

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/ports"
)

// pki writes a CA and two certificates it signs (the node's server
// certificate for 127.0.0.1 and the master's client certificate) as PEM
// files in dir.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cube test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(key)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kd)
	}
	p := pki{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("node", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("master", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// TestMutualTLS: a node agent started with a certificate and a client CA
// answers a master that verifies it and presents its own certificate, and
// the credential still; anything less is refused.
func TestMutualTLS(t *testing.T) {
	const token = "mtls-node-token-0123"
	p := newPKI(t, t.TempDir())
	srv, err := New(Options{DataDir: t.TempDir(), NodeID: "node-tls", Token: token, MasterURLs: []string{"https://master:8089"},
		TLSCertFile: p.serverCert, TLSKeyFile: p.serverKey, TLSClientCAFile: p.ca})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-done
	}()
	node := ports.Node{ID: "node-tls", Addr: ln.Addr().String()}

	tests := []struct {
		name  string
		creds cubelet.NodeCredentials
		want  string // "" for success, else part of the error
	}{
		{"mutual TLS and the credential", cubelet.NodeCredentials{Token: token, CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey}, ""},
		{"no client certificate", cubelet.NodeCredentials{Token: token, CAFile: p.ca}, "Unavailable"},
		{"plain gRPC", cubelet.NodeCredentials{Token: token}, "Unavailable"},
		{"mutual TLS without the credential", cubelet.NodeCredentials{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey}, "Unauthenticated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dial, secure, err := tc.creds.DialOptions()
			if err != nil {
				t.Fatal(err)
			}
			if secure != (tc.creds.CAFile != "") {
				t.Fatalf("secure = %v with CA %q", secure, tc.creds.CAFile)
			}
			c := cubelet.New(cubelet.Options{DialOptions: dial, Secure: secure})
			defer c.Close()
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			err = c.DestroyImage(cctx, node, "rfs-tls")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("DestroyImage: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("DestroyImage: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestTLSSettingsGoTogether(t *testing.T) {
	p := newPKI(t, t.TempDir())
	base := Options{DataDir: t.TempDir(), NodeID: "n", Token: "tls-node-token-0123", MasterURLs: []string{"http://m"}}
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"key without certificate", func(o *Options) { o.TLSKeyFile = p.serverKey }, "--tls-cert and --tls-key go together"},
		{"client CA without TLS", func(o *Options) { o.TLSClientCAFile = p.ca }, "--tls-client-ca needs --tls-cert"},
		{"unreadable certificate", func(o *Options) { o.TLSCertFile, o.TLSKeyFile = p.serverCert+".missing", p.serverKey }, "--tls-cert/--tls-key"},
		{"client CA that is no PEM", func(o *Options) {
			o.TLSCertFile, o.TLSKeyFile, o.TLSClientCAFile = p.serverCert, p.serverKey, p.serverKey
		}, "--tls-client-ca"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
