package core

import (
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
