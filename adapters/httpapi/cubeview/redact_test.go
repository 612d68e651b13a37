package cubeview

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRedactHidesCredentials: every credential a stored or generated
// request can carry is replaced, at any depth, and nothing else changes.
func TestRedactHidesCredentials(t *testing.T) {
	in := `{"z":1.50,"annotations":{"cube.master.rootfs.artifact.token":"tok-A","Cube.Master.Image.Token":"img-B","keep":"<a&b>"},` +
		`"containers":[{"image":{"token":"img-C","name":"user","annotations":{` +
		`"cube.master.rootfs.artifact.url":"http://m:8089/cube/template/artifact/download?artifact_id=rfs-1&token=tok-A"}}}],` +
		`"egress":[{"inject":[{"header":"X-Key","secret":"sec-D"}]}],"registry_password":"pw-E","registry_username":"user",` +
		`"mirror":"https://u:pw-F@registry.example/v2/","token":"","n":null,"b":true,"list":[1,"two"]}`
	out, changed := Redact([]byte(in))
	if !changed {
		t.Fatal("nothing redacted")
	}
	s := string(out)
	for _, secret := range []string{"tok-A", "img-B", "img-C", "sec-D", "pw-E", "pw-F"} {
		if strings.Contains(s, secret) {
			t.Errorf("%s survives: %s", secret, s)
		}
	}
	for _, kept := range []string{`"z":1.50`, `"keep":"<a&b>"`, `"name":"user"`, `"registry_username":"user"`, `artifact_id=rfs-1`,
		`"token":""`, `"n":null`, `"b":true`, `"list":[1,"two"]`, `"header":"X-Key"`, `https://u:REDACTED@registry.example/v2/`} {
		if !strings.Contains(s, kept) {
			t.Errorf("%s lost: %s", kept, s)
		}
	}
	// Key order is kept.
	if strings.Index(s, `"z"`) > strings.Index(s, `"annotations"`) {
		t.Errorf("key order changed: %s", s)
	}
	if !json.Valid(out) {
		t.Fatalf("not JSON: %s", s)
	}
}

func TestRedactLeavesOtherDocumentsAlone(t *testing.T) {
	for _, in := range []string{`{"template_id":"t","status":"READY"}`, `not json {"token":"x"}`, `{"token":"x"} trailing`, ``, `42`} {
		out, changed := Redact([]byte(in))
		if changed || string(out) != in {
			t.Errorf("Redact(%q) = %q, %v", in, out, changed)
		}
	}
	if got := RedactString(`{"token":"x"}`); got != `{"token":"REDACTED"}` {
		t.Errorf("RedactString = %s", got)
	}
	if got, ok := RedactURL("http://h/p?a=1"); ok || got != "http://h/p?a=1" {
		t.Errorf("RedactURL changed a URL without credentials: %s", got)
	}
}
