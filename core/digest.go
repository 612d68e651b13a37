package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
)

// SHA256Of reads r to the end and returns the lowercase hex sha256 of what
// it read and how many bytes that was: how artifact bytes are identified
// everywhere (builds, uploads, node copies).
func SHA256Of(r io.Reader) (sum string, n int64, err error) {
	h := sha256.New()
	n, err = io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// SHA256OfContext is SHA256Of that stops, with ctx's error, once ctx ends:
// hashing a gigabyte from a store can outlive the work it is for.
func SHA256OfContext(ctx context.Context, r io.Reader) (sum string, n int64, err error) {
	return SHA256Of(ctxReader{ctx, r})
}

// IsSHA256Hex reports whether s is a sha256 as SHA256Of writes it: 64
// lowercase hex digits.
func IsSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
