package sealer_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/sealertest"
)

var (
	keyA = sealer.Key{ID: "a", Secret: strings.Repeat("a1", 20)}
	keyB = sealer.Key{ID: "b", Secret: strings.Repeat("b2", 20)}
	keyC = sealer.Key{ID: "c", Secret: strings.Repeat("c3", 20)}
)

type harness struct{}

func (harness) MakeSealer(context.Context) (ports.Sealer, error) {
	return sealer.New([]sealer.Key{keyA}, "")
}
func (harness) MakeOtherSealer(context.Context) (ports.Sealer, error) {
	return sealer.New([]sealer.Key{keyB}, "")
}
func (harness) MakeRotatedSealer(context.Context) (ports.Sealer, error) {
	return sealer.New([]sealer.Key{keyC, keyA}, "")
}
func (harness) Close() {}

func TestConformance(t *testing.T) {
	sealertest.RunConformanceTests(t, func(context.Context, *testing.T) (sealertest.Harness, error) {
		return harness{}, nil
	})
}

// legacySeal seals as the master did before sealing keys: AES-256-GCM
// under a key derived from the callback token, "v1." + base64url(nonce ||
// ciphertext), the prefix as associated data.
func legacySeal(t *testing.T, token string, plain []byte) string {
	t.Helper()
	key, err := hkdf.Key(sha256.New, []byte(token), nil, "cubetemplatecenter registry credentials v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return "v1." + base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte("v1.")))
}

// TestLegacyValuesOpenWithTheCallbackToken: a value sealed the old way
// (key derived from the callback token) opens only when that token is
// given, and is never current, so the master seals it again with its own
// key; the token alone opens nothing sealed since.
func TestLegacyValuesOpenWithTheCallbackToken(t *testing.T) {
	const token = "the-callback-token-0123456789"
	old := legacySeal(t, token, []byte("pw"))
	s, err := sealer.New([]sealer.Key{keyA}, token)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Open(old); err != nil || string(got) != "pw" || s.Current(old) {
		t.Fatalf("legacy value: %q, %v, current %v", got, err, s.Current(old))
	}
	without, _ := sealer.New([]sealer.Key{keyA}, "")
	if _, err := without.Open(old); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("a legacy value opened without the callback token: %v", err)
	}
	fresh, _ := s.Seal([]byte("pw"))
	tokenOnly, _ := sealer.New(nil, token)
	if _, err := tokenOnly.Open(fresh); err == nil {
		t.Fatal("the callback token alone opened a value sealed with a sealing key")
	}
	if _, err := tokenOnly.Seal([]byte("pw")); !errors.Is(err, core.ErrUnsupported) {
		t.Fatalf("an open-only Sealer sealed: %v", err)
	}
}

func TestKeys(t *testing.T) {
	keys, err := sealer.ParseKeys("# comment\nnew:" + keyC.Secret + "\n\n old:" + keyA.Secret + " , older:" + keyB.Secret)
	if err != nil || len(keys) != 3 || keys[0].ID != "new" || keys[2].Secret != keyB.Secret {
		t.Fatalf("ParseKeys = %+v, %v", keys, err)
	}
	for name, keys := range map[string][]sealer.Key{
		"short secret": {{ID: "a", Secret: "short"}},
		"bad id":       {{ID: "a b", Secret: keyA.Secret}},
		"duplicate id": {keyA, {ID: "a", Secret: keyB.Secret}},
	} {
		if _, err := sealer.New(keys, ""); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		} else if strings.Contains(err.Error(), keyA.Secret) || strings.Contains(err.Error(), "short") {
			t.Errorf("%s: the error quotes the secret: %v", name, err)
		}
	}
	if _, err := sealer.ParseKeys("no-colon-" + keyA.Secret); err == nil || strings.Contains(err.Error(), keyA.Secret) {
		t.Errorf("a key without an id: %v", err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "sealing.keys")
	created, err := sealer.CreateKeyFile(path)
	if err != nil || len(created) != 1 {
		t.Fatalf("CreateKeyFile = %+v, %v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode().Perm(), err)
	}
	again, err := sealer.CreateKeyFile(path)
	if err != nil || again[0] != created[0] {
		t.Fatalf("a second CreateKeyFile replaced the key: %+v, %v", again, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sealer.ReadKeyFile(path); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("a key file others may read was accepted: %v", err)
	}
}
