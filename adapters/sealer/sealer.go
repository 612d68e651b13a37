package sealer

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const prefix = "v1."

// info separates this use of a shared secret from any other.
const info = "cubetemplatecenter registry credentials v1"

// Sealer is ports.Sealer over one AES-256-GCM key.
type Sealer struct {
	aead cipher.AEAD
}

var _ ports.Sealer = (*Sealer)(nil)

// New returns a Sealer for a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("sealing key: %d bytes, want 32: %w", len(key), core.ErrInvalidArgument)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// FromSecret derives the key from a shared secret (at least 16 bytes).
func FromSecret(secret string) (*Sealer, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("sealing secret: shorter than 16 bytes: %w", core.ErrInvalidArgument)
	}
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, info, 32)
	if err != nil {
		return nil, err
	}
	return New(key)
}

// Seal implements ports.Sealer.
func (s *Sealer) Seal(plaintext []byte) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, plaintext, []byte(prefix))
	return prefix + base64.RawURLEncoding.EncodeToString(out), nil
}

var errNotSealed = fmt.Errorf("not a value sealed with this key: %w", core.ErrInvalidArgument)

// Open implements ports.Sealer.
func (s *Sealer) Open(sealed string) ([]byte, error) {
	body, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, errNotSealed
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return nil, errNotSealed
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(prefix))
	if err != nil {
		return nil, errNotSealed
	}
	return plain, nil
}
