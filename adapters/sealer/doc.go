// Package sealer implements ports.Sealer with AES-256-GCM. The key is given
// (32 bytes) or derived from a shared secret the services already hold (the
// callback token) with HKDF-SHA256, so every control-plane replica can open
// what another sealed without a new setting. Sealed values are
// "v1." + base64url(nonce || ciphertext || tag).
package sealer
