package control_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestRedoRebuildsAPrivateImageWithItsOwnCredentials: a template created
// with registry credentials whose bytes are gone is rebuilt by a redo that
// names no credentials. The rebuild must go to the data plane with the
// template's own username (it is part of the stored request the data plane
// checks) and password; before, the redo call's empty credentials replaced
// them and the data plane refused the build as a different request.
func TestRedoRebuildsAPrivateImageWithItsOwnCredentials(t *testing.T) {
	e := newEnv(t, "node-1")
	s, err := sealer.New([]sealer.Key{{ID: "k1", Secret: strings.Repeat("k1", 20)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Sealer = s
	req := request("tpl-private")
	req.RegistryUsername, req.RegistryPassword = "bob", "s3cret"
	job := e.create(req)
	stored := e.job(job.JobID)
	if stored.RegistryAuth == "" || strings.Contains(stored.RegistryAuth, "s3cret") {
		t.Fatalf("registry auth stored as %q, want it sealed", stored.RegistryAuth)
	}
	e.build(job.JobID, fpA)
	e.wait()

	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) { return false, nil }
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r2", TemplateID: "tpl-private"})
	if err != nil {
		t.Fatal(err)
	}
	calls := e.disp.SubmitBuildCalls()
	br := calls[len(calls)-1].Req
	eq(t, "rebuild job", br.JobID, redo.JobID)
	eq(t, "username", br.Request.RegistryUsername, "bob")
	eq(t, "password", br.Request.RegistryPassword, "s3cret")
	// What the data plane checks: the request it is sent is the job's.
	norm := *br.Request
	n, err := core.NormalizeFromImageRequest(&norm, nil)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := core.CanonicalRequestJSON(n)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "request matches the job's", canon, e.job(redo.JobID).RequestJSON)
	if e.job(redo.JobID).RegistryAuth == "" {
		t.Error("the redo job does not carry the credentials forward")
	}

	// Credentials given to the redo call win.
	e.build(redo.JobID, fpA)
	e.wait()
	again, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-private", RegistryUsername: "bob", RegistryPassword: "rotated"})
	if err != nil {
		t.Fatal(err)
	}
	calls = e.disp.SubmitBuildCalls()
	eq(t, "rotated password", calls[len(calls)-1].Req.Request.RegistryPassword, "rotated")
	eq(t, "rotated job", calls[len(calls)-1].Req.JobID, again.JobID)
}

// TestCredentialsAreSealedAgainWithTheirOwnKey: credentials sealed the old
// way (a key derived from the callback token: a copy of the database and
// that token opened them) or with a key since rotated out of first place
// are sealed again with the current sealing key when the master starts
// (ResealCredentials), and still open for a redo; values already current
// are left alone. Without a sealing key, nothing new is kept and nothing
// is rewritten.
func TestCredentialsAreSealedAgainWithTheirOwnKey(t *testing.T) {
	const callbackToken = "callback-token-for-tests-0123"
	oldKey := sealer.Key{ID: "old", Secret: strings.Repeat("o1", 20)}
	newKey := sealer.Key{ID: "new", Secret: strings.Repeat("n2", 20)}
	e := newEnv(t, "node-1")

	// Three templates: sealed the legacy way, with the old key, with the
	// new key.
	seals := map[string]func([]byte) (string, error){}
	seals["tpl-legacy"] = func(p []byte) (string, error) { return legacySeal(callbackToken, p) }
	olds, _ := sealer.New([]sealer.Key{oldKey}, "")
	seals["tpl-old"] = olds.Seal
	news, _ := sealer.New([]sealer.Key{newKey}, "")
	seals["tpl-new"] = news.Seal
	jobs := map[string]string{}
	for tid, seal := range seals {
		e.svc.Sealer = sealFunc(seal)
		req := request(tid)
		req.RegistryUsername, req.RegistryPassword = "bob", "pw-"+tid
		job := e.create(req)
		e.build(job.JobID, map[string]string{"tpl-legacy": fpA, "tpl-old": fpB, "tpl-new": testFingerprint("sha256:" + strings.Repeat("c3", 32))}[tid])
		e.wait()
		jobs[tid] = job.JobID
	}
	current := e.job(jobs["tpl-new"]).RegistryAuth

	// Without a sealing key (only the callback token): nothing rewritten.
	openOnly, _ := sealer.New(nil, callbackToken)
	e.svc.Sealer = openOnly
	if n, stale, bad, err := e.svc.ResealCredentials(e.ctx); err != nil || n != 0 || stale != 1 || bad != 2 {
		t.Fatalf("open-only: resealed %d, stale %d, unreadable %d, %v; want 0, 1 (legacy), 2 (keys it lacks)", n, stale, bad, err)
	}

	s, err := sealer.New([]sealer.Key{newKey, oldKey}, callbackToken)
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Sealer = s
	n, stale, bad, err := e.svc.ResealCredentials(e.ctx)
	if err != nil || n != 2 || stale != 0 || bad != 0 {
		t.Fatalf("resealed %d, stale %d, unreadable %d, %v; want 2, 0, 0", n, stale, bad, err)
	}
	tokenOnly, _ := sealer.New(nil, callbackToken)
	for tid, jid := range jobs {
		v := e.job(jid).RegistryAuth
		if !s.Current(v) {
			t.Errorf("%s: %q is not sealed with the current key", tid, v)
		}
		if _, err := tokenOnly.Open(v); err == nil {
			t.Errorf("%s: the callback token alone still opens the credentials", tid)
		}
		// A redo still has them.
		plain, err := s.Open(v)
		if err != nil || !strings.Contains(string(plain), "pw-"+tid) {
			t.Errorf("%s: %q, %v", tid, plain, err)
		}
	}
	eq(t, "current value untouched", e.job(jobs["tpl-new"]).RegistryAuth, current)

	// No sealing key: new credentials are not kept.
	e.svc.Sealer = openOnly
	req := request("tpl-unkept")
	req.RegistryUsername, req.RegistryPassword = "bob", "pw"
	if j := e.create(req); e.job(j.JobID).RegistryAuth != "" {
		t.Fatal("credentials kept without a sealing key")
	}
}

// sealFunc is a Sealer that seals with fn (and opens nothing).
type sealFunc func([]byte) (string, error)

func (f sealFunc) Seal(p []byte) (string, error) { return f(p) }
func (sealFunc) Open(string) ([]byte, error)     { return nil, core.ErrInvalidArgument }
func (sealFunc) Current(string) bool             { return true }

// legacySeal seals as the master did before sealing keys: AES-256-GCM
// under a key derived from the callback token, "v1." + base64url(nonce ||
// ciphertext), the prefix as associated data.
func legacySeal(token string, plain []byte) (string, error) {
	key, err := hkdf.Key(sha256.New, []byte(token), nil, "cubetemplatecenter registry credentials v1", 32)
	if err != nil {
		return "", err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return "v1." + base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte("v1."))), nil
}
