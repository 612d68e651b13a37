package testca

import (
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// PEM returns a self-signed CA certificate, one PEM block, for seed: the
// same seed gives the same bytes (Ed25519 signatures are deterministic),
// another seed another certificate (a rotated CA).
func PEM(seed byte) []byte {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed + byte(i)
	}
	key := ed25519.NewKeyFromSeed(s)
	tpl := &x509.Certificate{
		SerialNumber:          big.NewInt(int64(seed) + 1),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("CubeEgress test root %d", seed)},
		NotBefore:             time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(nil, tpl, tpl, key.Public(), key)
	if err != nil {
		panic(fmt.Sprintf("testca: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
