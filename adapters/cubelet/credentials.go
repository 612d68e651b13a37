package cubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// NodeTokenMetadata is the gRPC metadata key that carries the node
// credential on every call to a node. A Cubelet does not read it; the node
// agent (package agent) refuses every call without the right value.
const NodeTokenMetadata = "x-cube-node-token"

// MinNodeTokenLength is the shortest node credential accepted (16
// characters; `openssl rand -hex 32` gives 64).
const MinNodeTokenLength = 16

// NodeCredentials are what the control plane presents to its nodes: the
// per-deployment token, sent as gRPC metadata on every call, and optional
// TLS. With CAFile set, connections use TLS and the nodes' certificates
// must chain to it; CertFile and KeyFile add the master's client
// certificate (mutual TLS, for node agents started with a client CA).
// Without CAFile the transport is plain: nodes sit on an internal network.
type NodeCredentials struct {
	Token    string
	CAFile   string
	CertFile string
	KeyFile  string
}

// ErrTokenTooShort is a node credential below MinNodeTokenLength.
var ErrTokenTooShort = fmt.Errorf("is shorter than %d characters; generate one with `openssl rand -hex 32`", MinNodeTokenLength)

// CheckNodeToken validates a configured node credential; "" is allowed
// (the caller decides whether a credential is required).
func CheckNodeToken(token string) error {
	if token != "" && len(strings.TrimSpace(token)) < MinNodeTokenLength {
		return ErrTokenTooShort
	}
	return nil
}

// DialOptions are the options every connection to a node takes, and
// whether they carry transport credentials (Options.Secure). Errors name
// the file that could not be used, never the token.
func (c NodeCredentials) DialOptions() ([]grpc.DialOption, bool, error) {
	var opts []grpc.DialOption
	if c.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCredentials{token: c.Token}))
	}
	if c.CAFile == "" {
		if c.CertFile != "" || c.KeyFile != "" {
			return nil, false, errors.New("a client certificate for nodes needs the CA that verifies them: TLS to nodes is on only with a CA file")
		}
		return opts, false, nil
	}
	pool, err := LoadCertPool(c.CAFile)
	if err != nil {
		return nil, false, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if c.CertFile != "" || c.KeyFile != "" {
		if c.CertFile == "" || c.KeyFile == "" {
			return nil, false, errors.New("a client certificate for nodes needs both the certificate and its key")
		}
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, false, fmt.Errorf("client certificate %s: %w", c.CertFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg))), true, nil
}

// LoadCertPool reads the PEM certificates of path (a CA bundle) into a
// new pool.
func LoadCertPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// tokenCredentials puts the node credential on every call. It does not
// require transport security: most nodes are plain gRPC on an internal
// network, and a Cubelet ignores the value.
type tokenCredentials struct{ token string }

func (t tokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{NodeTokenMetadata: t.token}, nil
}

func (tokenCredentials) RequireTransportSecurity() bool { return false }
