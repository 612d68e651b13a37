package core

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
)

// Upstream's CubeEgress root CA: the file on the host, its directory, and
// the cap on what is read of it.
const (
	CubeCADir      = "/etc/cube/ca"
	CubeCAFileName = "cube-root-ca.crt"
	CubeCAPath     = CubeCADir + "/" + CubeCAFileName
	MaxCubeCABytes = 1 << 20
)

// CubeCA is a parsed CubeEgress root CA.
type CubeCA struct {
	// PEM is the certificate re-encoded as one canonical PEM block.
	PEM []byte
	// DER is the certificate.
	DER []byte
	// Fingerprint is hex(sha256(DER)) (upstream's
	// cube_egress_ca_fingerprint): a cosmetic change of the PEM text keeps
	// it, a rotation changes it, and with it every template's fingerprint.
	Fingerprint string
}

// ParseCubeCA checks a CubeEgress root CA as upstream does: exactly one
// PEM CERTIFICATE block that parses as an X.509 certificate. Errors name
// the field "cube_egress_ca".
func ParseCubeCA(data []byte) (*CubeCA, error) {
	if len(data) > MaxCubeCABytes {
		return nil, fieldErr("cube_egress_ca", "%d bytes, at most %d", len(data), MaxCubeCABytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fieldErr("cube_egress_ca", "is empty")
	}
	block, rest := pem.Decode(data)
	switch {
	case block == nil:
		return nil, fieldErr("cube_egress_ca", "is not PEM-encoded")
	case block.Type != "CERTIFICATE":
		return nil, fieldErr("cube_egress_ca", "holds a %q PEM block, want one CERTIFICATE", block.Type)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fieldErr("cube_egress_ca", "is not an X.509 certificate: %v", err)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, fieldErr("cube_egress_ca", "holds more than one PEM block; want the one root certificate")
	}
	sum := sha256.Sum256(block.Bytes)
	return &CubeCA{
		PEM:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}),
		DER:         block.Bytes,
		Fingerprint: hex.EncodeToString(sum[:]),
	}, nil
}

// WantsCubeCA reports whether the request wants the CubeEgress root CA
// baked into its image: with_cube_ca, true unless the request says false
// (upstream's default).
func WantsCubeCA(req *FromImageRequest) bool {
	return req == nil || req.WithCubeCA == nil || *req.WithCubeCA
}
