package sealer

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Value prefixes: v2 names the key ("v2.<id>."), v1 is the legacy form
// sealed with a key derived from the callback token.
const (
	prefixV2 = "v2."
	prefixV1 = "v1."
)

// info separates the uses of a secret.
const (
	infoV2 = "cubetemplatecenter registry credentials v2"
	infoV1 = "cubetemplatecenter registry credentials v1"
)

// MinSecretLen is the shortest key secret accepted (`openssl rand -hex 32`
// gives 64 characters).
const MinSecretLen = 32

// Key is one sealing key. Its ID is written into every value it seals, so
// that keys can rotate: values sealed with an older key still open while
// that key is listed, and are sealed again with the current one.
type Key struct {
	ID     string
	Secret string
}

var keyID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Sealer is ports.Sealer over AES-256-GCM keys with ids; the first key
// seals, every key opens what it sealed, and a legacy key (derived from
// the callback token) opens values of the v1 form.
type Sealer struct {
	current string
	aeads   map[string]cipher.AEAD
	legacy  cipher.AEAD
}

var _ ports.Sealer = (*Sealer)(nil)

// New returns a Sealer sealing with keys[0] and opening with every key.
// legacySecret, when not empty, is the callback token the v1 values were
// sealed with (their key derived from it), so they still open and can be
// sealed again. With no keys the Sealer only opens: Seal fails with
// core.ErrUnsupported.
func New(keys []Key, legacySecret string) (*Sealer, error) {
	s := &Sealer{aeads: map[string]cipher.AEAD{}}
	for i, k := range keys {
		if !keyID.MatchString(k.ID) {
			return nil, fmt.Errorf("sealing key %d: id %q: want 1-32 letters, digits, '-' or '_': %w", i+1, k.ID, core.ErrInvalidArgument)
		}
		if len(k.Secret) < MinSecretLen {
			return nil, fmt.Errorf("sealing key %s: the secret is %d characters, want at least %d (`openssl rand -hex 32`): %w", k.ID, len(k.Secret), MinSecretLen, core.ErrInvalidArgument)
		}
		if _, dup := s.aeads[k.ID]; dup {
			return nil, fmt.Errorf("sealing key id %s is listed twice: %w", k.ID, core.ErrInvalidArgument)
		}
		aead, err := aeadFrom(k.Secret, infoV2+" "+k.ID)
		if err != nil {
			return nil, err
		}
		s.aeads[k.ID] = aead
		if i == 0 {
			s.current = k.ID
		}
	}
	if strings.TrimSpace(legacySecret) != "" {
		aead, err := aeadFrom(legacySecret, infoV1)
		if err != nil {
			return nil, err
		}
		s.legacy = aead
	}
	return s, nil
}

func aeadFrom(secret, info string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, info, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// CurrentKey is the id of the key Seal uses ("" for an open-only Sealer).
func (s *Sealer) CurrentKey() string { return s.current }

// Seal implements ports.Sealer.
func (s *Sealer) Seal(plaintext []byte) (string, error) {
	if s.current == "" {
		return "", fmt.Errorf("seal: no sealing key is configured: %w", core.ErrUnsupported)
	}
	aead := s.aeads[s.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	head := prefixV2 + s.current + "."
	out := aead.Seal(nonce, nonce, plaintext, []byte(head))
	return head + base64.RawURLEncoding.EncodeToString(out), nil
}

var errNotSealed = fmt.Errorf("not a value sealed with a configured key: %w", core.ErrInvalidArgument)

// Open implements ports.Sealer.
func (s *Sealer) Open(sealed string) ([]byte, error) {
	var aead cipher.AEAD
	var head, body string
	switch {
	case strings.HasPrefix(sealed, prefixV2):
		id, rest, ok := strings.Cut(strings.TrimPrefix(sealed, prefixV2), ".")
		if !ok {
			return nil, errNotSealed
		}
		if aead = s.aeads[id]; aead == nil {
			if !keyID.MatchString(id) {
				return nil, errNotSealed
			}
			return nil, fmt.Errorf("sealed with key %s, which is not configured: %w", id, core.ErrInvalidArgument)
		}
		head, body = prefixV2+id+".", rest
	case strings.HasPrefix(sealed, prefixV1) && s.legacy != nil:
		aead, head, body = s.legacy, prefixV1, strings.TrimPrefix(sealed, prefixV1)
	default:
		return nil, errNotSealed
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return nil, errNotSealed
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], []byte(head))
	if err != nil {
		return nil, errNotSealed
	}
	return plain, nil
}

// Current implements ports.Sealer: the value names the current key.
func (s *Sealer) Current(sealed string) bool {
	return s.current != "" && strings.HasPrefix(sealed, prefixV2+s.current+".")
}

// ParseKeys reads keys written as "id:secret", separated by commas or
// new lines; blank lines and lines starting with '#' are skipped. The
// first key is the current one.
func ParseKeys(text string) ([]Key, error) {
	var keys []Key
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for entry := range strings.SplitSeq(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			id, secret, ok := strings.Cut(entry, ":")
			if !ok {
				return nil, fmt.Errorf("sealing key %d: want id:secret (the secret is not shown): %w", len(keys)+1, core.ErrInvalidArgument)
			}
			keys = append(keys, Key{ID: strings.TrimSpace(id), Secret: strings.TrimSpace(secret)})
		}
	}
	return keys, sc.Err()
}

// ReadKeyFile reads a key file (ParseKeys' format). A file others may
// read or write is refused: it holds secrets.
func ReadKeyFile(path string) ([]Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("sealing key file %s is mode %04o: others may read it; chmod 600 it: %w", path, fi.Mode().Perm(), core.ErrInvalidArgument)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("sealing key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("sealing key file %s holds no key: %w", path, core.ErrInvalidArgument)
	}
	return keys, nil
}

// CreateKeyFile writes a key file holding one fresh key, readable by its
// owner only, and returns its keys; an existing file is read instead.
func CreateKeyFile(path string) ([]Key, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	k := Key{ID: "k" + hex.EncodeToString(id), Secret: hex.EncodeToString(secret)}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return ReadKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(f, "# Sealing keys of cubemaster: id:secret, the first seals, all open.\n%s:%s\n", k.ID, k.Secret)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return []Key{k}, nil
}
