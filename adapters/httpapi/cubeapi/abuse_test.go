package cubeapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
)

// abuseCase is one hostile request and the documented answer (docs/api.md):
// public routes answer HTTP 200 with the ret_code; internal and byte
// routes answer real statuses. Every case must also change nothing.
type abuseCase struct {
	name           string
	method, target string
	body           string
	header         map[string]string
	wantHTTP       int    // 0: 200 with an envelope
	wantCode       int    // ret_code of a public route
	wantMsg        string // in ret_msg (public) or the body (others)
}

// secrets must never appear in an answer.
var secrets = []string{"seed-download-token", "two-download-token", testToken, "hunter2"}

// runAbuse sends every case to a fresh environment over each store and
// checks the answer and that no row changed and nothing left the master.
func runAbuse(t *testing.T, cases []abuseCase) {
	t.Helper()
	for _, st := range []struct {
		name string
		env  func(testing.TB) *realEnv
	}{{"memstore", newRealEnv}, {"sqlite", newSQLEnv}} {
		t.Run(st.name, func(t *testing.T) {
			e := st.env(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					before, out := e.snapshot(), e.outside()
					rec := doAbuse(e.h, tc)
					checkAnswer(t, rec, tc)
					if after := e.snapshot(); after != before {
						t.Errorf("rows changed:\nbefore:\n%s\nafter:\n%s", before, after)
					}
					if got := e.outside(); got != out {
						t.Errorf("calls left the master: %s, before %s", got, out)
					}
				})
			}
		})
	}
}

func doAbuse(h http.Handler, tc abuseCase) *httptest.ResponseRecorder {
	var body *strings.Reader
	if tc.body != "" {
		body = strings.NewReader(tc.body)
	}
	var req *http.Request
	if body != nil {
		req = httptest.NewRequest(tc.method, tc.target, body)
	} else {
		req = httptest.NewRequest(tc.method, tc.target, nil)
	}
	for k, v := range tc.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, tc abuseCase) {
	t.Helper()
	b := rec.Body.String()
	for _, s := range secrets {
		if strings.Contains(b, s) {
			t.Errorf("the answer holds a secret (%s): %s", s, clipMsg(b))
		}
	}
	if tc.wantHTTP != 0 {
		if rec.Code != tc.wantHTTP || !strings.Contains(b, tc.wantMsg) {
			t.Fatalf("HTTP %d %s, want %d with %q", rec.Code, clipMsg(b), tc.wantHTTP, tc.wantMsg)
		}
		return
	}
	code, msg := envelopeOf(t, rec)
	if code != tc.wantCode || !strings.Contains(msg, tc.wantMsg) {
		t.Fatalf("ret_code %d %q, want %d with %q", code, msg, tc.wantCode, tc.wantMsg)
	}
}

// envelopeOf checks that rec is a well-formed public answer: HTTP 200,
// JSON, one object with ret.ret_code (a number) and ret.ret_msg (a
// string).
func envelopeOf(t testing.TB, rec *httptest.ResponseRecorder) (int, string) {
	t.Helper()
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("HTTP %d %q: %s", rec.Code, rec.Header().Get("Content-Type"), clipMsg(rec.Body.String()))
	}
	var env struct {
		Ret *struct {
			Code *json.Number `json:"ret_code"`
			Msg  *string      `json:"ret_msg"`
		} `json:"ret"`
	}
	dec := json.NewDecoder(rec.Body)
	dec.UseNumber()
	if err := dec.Decode(&env); err != nil || env.Ret == nil || env.Ret.Code == nil || env.Ret.Msg == nil || dec.More() {
		t.Fatalf("not an envelope (%v): %s", err, clipMsg(rec.Body.String()))
	}
	code, err := env.Ret.Code.Int64()
	if err != nil {
		t.Fatalf("ret_code %s", *env.Ret.Code)
	}
	return int(code), *env.Ret.Msg
}

func clipMsg(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// jsonBody is base with fields set (a nil value deletes the field).
func jsonBody(base map[string]any, kv ...any) string {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
		} else {
			m[kv[i].(string)] = kv[i+1]
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

var createBase = map[string]any{"requestID": "r-abuse", "source_image_ref": "registry.example/app:2",
	"writable_layer_size": "20Gi", "template_id": "tpl-abuse"}

func fromImage(kv ...any) abuseCase {
	return abuseCase{method: http.MethodPost, target: PathFromImage, body: jsonBody(createBase, kv...)}
}

// named gives a case its name and expected answer.
func (c abuseCase) named(name string, code int, msg string) abuseCase {
	c.name, c.wantCode, c.wantMsg = name, code, msg
	return c
}

func (c abuseCase) status(name string, status int, msg string) abuseCase {
	c.name, c.wantHTTP, c.wantMsg = name, status, msg
	return c
}

func (c abuseCase) with(k, v string) abuseCase {
	c.header = maps.Clone(c.header)
	if c.header == nil {
		c.header = map[string]string{}
	}
	c.header[k] = v
	return c
}

const (
	bad      = 130400
	notFound = 130404
	conflict = 130409
)

// TestAbuseImageReferences: references a user may not make the data plane
// fetch are refused before a job is written (the catalogue's §6c list).
// Names that resolve to refused addresses are the data plane's to refuse
// when it dials (adapters/registry TestNamesResolvingToRefusedAddresses);
// ocidir:// is its opt-in (TestLocalLayoutIsTheDataPlanesDecision).
func TestAbuseImageReferences(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	refs := []struct{ name, ref, msg string }{
		{"local path", "/etc/passwd", "not an image reference"},
		{"relative path", "../../etc/shadow", "not an image reference"},
		{"file URL", "file:///etc/passwd", `scheme "file"`},
		{"ocifile", "ocifile:///tmp/x.tar", `scheme "ocifile"`},
		{"http URL", "http://evil.example/x", `scheme "http"`},
		{"https URL", "https://registry.example/v2/x/manifests/1", `scheme "https"`},
		{"empty ocidir", "ocidir://", "needs the layout's path"},
		{"malformed ocidir", "ocidir:///var/lay#outs:v1", "path may hold only"},
		{"ocidir with a bad digest", "ocidir:///var/layouts@sha256:abc", "digest must be"},
		{"metadata address", "169.254.169.254/latest/meta-data:x", "cloud metadata address"},
		{"metadata address with port", "169.254.169.254:80/latest/meta-data", "cloud metadata address"},
		{"link-local address", "169.254.10.1:5000/x:1", "link-local"},
		{"IPv6 metadata address", "[fd00:ec2::254]:80/x:1", "cloud metadata address"},
		{"IPv6 link-local", "[fe80::1]:5000/x", "link-local"},
		{"Alibaba metadata", "100.100.100.200/latest:x", "cloud metadata address"},
		{"GCP metadata name", "metadata.google.internal/computemetadata/v1:x", "metadata service"},
		{"metadata short name", "metadata:80/x", "metadata service"},
		{"unspecified address", "0.0.0.0:5000/x", "unspecified"},
		{"multicast address", "239.1.2.3/x", "multicast"},
		{"NAT64 metadata", "[64:ff9b::a9fe:a9fe]/x", "embedding 169.254.169.254 (NAT64), a cloud metadata address"},
		{"local-use NAT64 metadata", "[64:ff9b:1::a9fe:a9fe]:80/x", "(local-use NAT64 /96), a cloud metadata address"},
		{"6to4 metadata", "[2002:a9fe:a9fe::]/x", "embedding 169.254.169.254 (6to4)"},
		{"Teredo client metadata", "[2001:0:4136:e378:8000:63bf:5601:5601]/x", "(Teredo client), a cloud metadata address"},
		{"IPv4-compatible link-local", "[::a9fe:101]:5000/x", "(IPv4-compatible), link-local"},
		{"NAT64 unspecified", "[64:ff9b::]:5000/x", "(NAT64), an unspecified"},
		{"short sha256", "alpine@sha256:0123456789abcdef0123456789abcdef", "digest must be"},
		{"md5 digest", "alpine@md5:0123456789abcdef0123456789abcdef", "digest must be"},
		{"upper-case digest", "alpine@sha256:" + strings.ToUpper(hex64), "digest must be"},
		{"digest without hex", "alpine@sha256:", "digest must be"},
		{"user info", "user:hunter2@registry.example/x", "user info"},
		{"newline inside", "alpine\n:latest", "whitespace or control"},
		{"carriage return", "alpine:la\rtest", "whitespace or control"},
		{"NUL", "alp\x00ine", "whitespace or control"},
		{"escape", "alpine\x1b[31m", "whitespace or control"},
		{"space inside", "alp ine", "whitespace or control"},
		{"DEL", "alpine\x7f", "whitespace or control"},
		{"homoglyph host", "regіstry.example/x", "non-ASCII"},
		{"right-to-left override", "alpine\u202e:1", "non-ASCII"},
		{"upper-case repository", "ALPINE", "lowercase"},
		{"tag of 129", "alpine:" + strings.Repeat("t", 129), "tag must be"},
		{"repository of 300", "registry.example/" + strings.Repeat("a", 300), "longer than 255"},
		{"10 kB reference", strings.Repeat("a", 10240), "longer than 1024"},
		{"1025 characters", "registry.example/" + strings.Repeat("a/", 504), "longer than 1024"},
		{"whitespace only", "   ", "is required"},
		{"bare localhost", "localhost", "names no repository"},
		{"empty path component", "registry.example//x", "not an image reference"},
		{"bad port", "registry.example:http/x", "not an image reference"},
		{"unclosed IPv6", "[::1/x", "not an image reference"},
	}
	var cases []abuseCase
	for _, r := range refs {
		cases = append(cases, fromImage("source_image_ref", r.ref).named(r.name, bad, "source_image_ref"))
		if r.msg != "" {
			cases[len(cases)-1].wantMsg = r.msg
		}
	}
	runAbuse(t, cases)
}

// TestAbuseFromImageFields: every other field of a create, and bodies that
// are not a create at all.
func TestAbuseFromImageFields(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	scope1025 := make([]string, 1025)
	for i := range scope1025 {
		scope1025[i] = "node-1"
	}
	cases := []abuseCase{
		fromImage("requestID", nil).named("no requestID", bad, "requestID"),
		fromImage("requestID", long(129)).named("requestID of 129", bad, "requestID"),
		fromImage("requestID", "r\n1").named("requestID with a newline", bad, "requestID"),
		fromImage("source_image_ref", nil).named("no image", bad, "source_image_ref"),
		fromImage("template_id", "../../etc").named("template id traversal", bad, "template_id"),
		fromImage("template_id", "a/b").named("template id with a slash", bad, "template_id"),
		fromImage("template_id", "%2e%2e").named("template id percent-encoded", bad, "template_id"),
		fromImage("template_id", "t\x00").named("template id with NUL", bad, "template_id"),
		fromImage("template_id", "föo").named("template id not ASCII", bad, "template_id"),
		fromImage("template_id", "-x").named("template id with a leading dash", bad, "template_id"),
		fromImage("template_id", long(129)).named("template id of 129", bad, "template_id"),
		fromImage("template_id", "'; DROP TABLE t_cube_template_definition;--").named("template id SQL", bad, "template_id"),
		fromImage("template_id", "tpl-seed").named("existing template", bad, "already exists"),
		fromImage("template_id", "tpl-pending", "source_image_ref", "other:1").named("template with an active job", conflict, "PENDING"),
		fromImage("template_id", "seed").named("template id held as an alias", conflict, "seed"),
		// An alias another template holds is no longer refused: it moves
		// to the new template once that is READY (core/control alias.go).
		fromImage("alias", "tpl-seed").named("alias shaped like an id", bad, "alias"),
		fromImage("alias", "rfs-x").named("alias shaped like an artifact id", bad, "alias"),
		fromImage("alias", "../x").named("alias traversal", bad, "alias"),
		fromImage("alias", "Web").named("alias upper case", bad, "alias"),
		fromImage("alias", "föo").named("alias not ASCII", bad, "alias"),
		fromImage("alias", "fo\u200do").named("alias with a zero-width joiner", bad, "alias"),
		fromImage("alias", "a\u202eb").named("alias with RTL override", bad, "alias"),
		fromImage("alias", "-web").named("alias with a leading dash", bad, "alias"),
		fromImage("alias", "web-").named("alias with a trailing dash", bad, "alias"),
		fromImage("alias", long(65)).named("alias of 65", bad, "alias"),
		fromImage("alias", "a b").named("alias with a space", bad, "alias"),
		fromImage("writable_layer_size", nil).named("no writable layer size", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "0").named("zero writable layer", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "-1Gi").named("negative writable layer", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "1e309").named("overflowing writable layer", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "99999999999999999999999Ti").named("huge writable layer", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "20 Gi").named("writable layer with a space", bad, "writable_layer_size"),
		fromImage("writable_layer_size", "20GiB").named("writable layer unit", bad, "writable_layer_size"),
		fromImage("writable_layer_size", 20).named("writable layer as a number", bad, "writable_layer_size: expected string"),
		fromImage("exposed_ports", []any{-1}).named("negative port", bad, "exposed_ports"),
		fromImage("exposed_ports", []any{0}).named("port zero", bad, "exposed_ports"),
		fromImage("exposed_ports", []any{65536}).named("port 65536", bad, "exposed_ports"),
		fromImage("exposed_ports", []any{1, 2, 3, 4}).named("four custom ports", bad, "exposed_ports"),
		fromImage("exposed_ports", []any{"80"}).named("port as a string", bad, "exposed_ports"),
		fromImage("exposed_ports", []any{3000000000}).named("port overflowing int32", bad, "exposed_ports"),
		fromImage("instance_type", long(65)).named("instance type of 65", bad, "instance_type"),
		fromImage("instance_type", "cube box").named("instance type with a space", bad, "instance_type"),
		fromImage("instance_type", "\x00").named("instance type NUL", bad, "instance_type"),
		fromImage("network_type", long(1000)).named("network type of 1000", bad, "network_type"),
		fromImage("platform", "linux").named("platform without arch", bad, "platform"),
		fromImage("platform", "../amd64").named("platform traversal", bad, "platform"),
		fromImage("platform", "linux/"+long(100)).named("platform of 106", bad, "platform"),
		fromImage("distribution_scope", []any{""}).named("empty scope entry", bad, "distribution_scope"),
		fromImage("distribution_scope", []any{"node\x00"}).named("scope entry with NUL", bad, "distribution_scope"),
		fromImage("distribution_scope", []any{long(257)}).named("scope entry of 257", bad, "distribution_scope"),
		fromImage("distribution_scope", scope1025).named("1025 scope entries", bad, "distribution_scope"),
		fromImage("distribution_scope", "node-1").named("scope as a string", bad, "distribution_scope"),
		fromImage("container_overrides", map[string]any{"envs": []any{map[string]any{"key": "A=B", "value": "x"}}}).named("env key with =", bad, "envs[0].key"),
		fromImage("container_overrides", map[string]any{"envs": []any{map[string]any{"key": "A\x00", "value": "x"}}}).named("env key with NUL", bad, "envs[0].key"),
		fromImage("container_overrides", map[string]any{"envs": []any{map[string]any{"value": "x"}}}).named("env without key", bad, "envs[0].key"),
		fromImage("container_overrides", map[string]any{"envs": []any{map[string]any{"key": "A", "value": "\x00"}}}).named("env value with NUL", bad, "envs[0].value"),
		fromImage("container_overrides", map[string]any{"command": []any{"sh\x00-c"}}).named("command with NUL", bad, "command"),
		fromImage("container_overrides", map[string]any{"security_context": "privileged"}).named("security context not an object", bad, "security_context"),
		fromImage("container_overrides", map[string]any{"volume_mounts": map[string]any{}}).named("volume mounts not an array", bad, "volume_mounts"),
		fromImage("container_overrides", map[string]any{"volume_mounts": []any{map[string]any{"container_path": "/"}}}).named("volume mount over the rootfs", bad, "container_path"),
		fromImage("container_overrides", []any{}).named("overrides as an array", bad, "container_overrides"),
		fromImage("container_overrides", map[string]any{"annotations": map[string]any{core.AnnotationInjectEnvd: "true"}}).named("envd without a binary", bad, "envd"),
	}
	runAbuse(t, cases)
}

// bodyCases are hostile bodies for a JSON route.
func bodyCases(method, target string) []abuseCase {
	c := abuseCase{method: method, target: target}
	body := func(b string) abuseCase { c := c; c.body = b; return c }
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	return []abuseCase{
		body("").named("empty body", bad, "body"),
		body("{").named("truncated", bad, "body: truncated"),
		body(`{"requestID":"r",}`).named("trailing comma", bad, "malformed JSON"),
		body(`{"requestID":"r"}{"requestID":"s"}`).named("two values", bad, "unexpected data"),
		body(`{"requestID":"r"} x`).named("trailing garbage", bad, "unexpected data"),
		body("\xef\xbb\xbf{}").named("byte order mark", bad, "malformed JSON"),
		body(`[]`).named("array", bad, ""),
		body(`"x"`).named("string", bad, ""),
		body(`12`).named("number", bad, ""),
		body(`{"requestID":["r"]}`).named("requestID as an array", bad, ""),
		body(`{"requestID":"r","x":"`+strings.Repeat("a", 2<<20)+`"}`).named("2 MiB body", bad, "larger than 1048576 bytes"),
		body(strings.Repeat("[", 200000)).named("deep arrays", bad, "body"),
		body(deep).named("deep objects", bad, "body"),
		body(`{"requestID":1e999999}`).named("huge number", bad, ""),
		body("a=b&c=d").with("Content-Type", "application/x-www-form-urlencoded").named("form body", bad, "Content-Type"),
		body(`{"requestID":"r"}`).with("Content-Type", "text/plain").named("JSON as text/plain", bad, "Content-Type"),
		body(`{"requestID":"r"}`).with("Content-Type", "text/plain; charset=utf-8").named("JSON as text/plain with charset", bad, "Content-Type"),
		body("--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b--\r\n").with("Content-Type", "multipart/form-data; boundary=b").named("multipart form", bad, "Content-Type"),
	}
}

// TestAbuseBodies: every public JSON route against malformed, oversized
// and mistyped bodies and the content types a browser may send to another
// origin without asking.
func TestAbuseBodies(t *testing.T) {
	var cases []abuseCase
	for _, r := range []struct{ method, target string }{
		{http.MethodPost, PathFromImage}, {http.MethodPost, PathRedo}, {http.MethodPost, PathMigrate},
		{http.MethodDelete, PathTemplate}, {http.MethodPut, "/cube/template/tpl-seed/alias"}, {http.MethodPost, PathTemplate},
		{http.MethodPost, PathResolve}, {http.MethodPost, PathPreview},
	} {
		for _, c := range bodyCases(r.method, r.target) {
			if c.body == "" && r.method == http.MethodPut {
				continue // an empty alias body clears the alias (documented)
			}
			c.name = r.method + " " + r.target + ": " + c.name
			cases = append(cases, c)
		}
	}
	runAbuse(t, cases)
}

// TestAbuseOtherRoutes: bad ids and aliases on redo, migrate, delete,
// alias, create from a sandbox request, resolve, preview and the reads.
func TestAbuseOtherRoutes(t *testing.T) {
	post := func(target string, v any) abuseCase {
		b, _ := json.Marshal(v)
		return abuseCase{method: http.MethodPost, target: target, body: string(b)}
	}
	del := func(v any) abuseCase { c := post(PathTemplate, v); c.method = http.MethodDelete; return c }
	alias := func(id string, v any) abuseCase {
		c := post("/cube/template/"+id+"/alias", v)
		c.method = http.MethodPut
		return c
	}
	get := func(target string) abuseCase { return abuseCase{method: http.MethodGet, target: target} }
	sandbox := func(tid string, extra map[string]any) map[string]any {
		m := map[string]any{"annotations": map[string]any{core.AnnotationTemplateID: tid}, "containers": []any{map[string]any{"name": "c"}}}
		maps.Copy(m, extra)
		return m
	}
	long := strings.Repeat("a", 129)
	cases := []abuseCase{
		post(PathRedo, map[string]any{"template_id": "tpl-seed"}).named("redo without requestID", bad, "requestID"),
		post(PathRedo, map[string]any{"requestID": "r"}).named("redo without template", bad, "template id is required"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "../x"}).named("redo traversal", bad, "template_id"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": long}).named("redo id of 129", bad, "template_id"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "nope"}).named("redo unknown template", notFound, "nope"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-seed", "distribution_scope": []any{"node-9"}}).named("redo unknown node", bad, "node-9"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-seed", "distribution_scope": []any{"n\x00"}}).named("redo scope NUL", bad, "distribution_scope"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-seed", "distribution_scope": []any{""}}).named("redo empty scope entry", bad, "distribution_scope"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-seed", "failed_only": true}).named("redo failed-only with nothing failed", bad, ""),
		post(PathRedo, map[string]any{"requestID": long, "template_id": "tpl-seed"}).named("redo requestID of 129", bad, "requestID"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-pending"}).named("redo with an active job", conflict, "PENDING"),
		post(PathRedo, map[string]any{"requestID": "r", "template_id": "tpl-seed", "failed_only": "yes"}).named("redo failed_only as a string", bad, "failed_only"),

		post(PathMigrate, map[string]any{"requestID": "r"}).named("migrate without template", bad, "template id is required"),
		post(PathMigrate, map[string]any{"requestID": "r", "template_id": "a/b"}).named("migrate bad id", bad, "template_id"),
		post(PathMigrate, map[string]any{"requestID": "r", "template_id": "nope"}).named("migrate unknown", notFound, "nope"),
		post(PathMigrate, map[string]any{"requestID": "r", "template_id": "tpl-seed", "backend": "s3"}).named("migrate other backend", bad, "backend"),
		post(PathMigrate, map[string]any{"requestID": "r", "template_id": "tpl-seed", "backend": "../../x"}).named("migrate nonsense backend", bad, "backend"),
		post(PathMigrate, map[string]any{"requestID": long, "template_id": "tpl-seed"}).named("migrate requestID of 129", bad, "requestID"),
		post(PathMigrate, map[string]any{"requestID": "r", "template_id": "tpl-pending"}).named("migrate a template not ready", notFound, ""),

		del(map[string]any{"RequestID": "r"}).named("delete without id", bad, "template id is required"),
		del(map[string]any{"RequestID": "r", "template_id": "../tpl-seed"}).named("delete traversal", bad, "template_id"),
		del(map[string]any{"RequestID": "r", "template_id": "%2e%2e"}).named("delete percent-encoded", bad, "template_id"),
		del(map[string]any{"RequestID": "r", "template_id": "tpl-seed' OR '1'='1"}).named("delete SQL", bad, "template_id"),
		del(map[string]any{"RequestID": "r", "template_id": "nope"}).named("delete unknown", notFound, "nope"),
		del(map[string]any{"RequestID": "r", "template_id": "nope-alias"}).named("delete unknown alias", notFound, ""),
		del(map[string]any{"RequestID": "r", "template_id": long}).named("delete id of 129", bad, "template_id"),
		del(map[string]any{"RequestID": "r", "template_id": 7}).named("delete id as a number", bad, "template_id"),
		del(map[string]any{"RequestID": "r", "template_id": "tpl-pending"}).named("delete with an active job", conflict, ""),

		// Taking another template's alias moves it, but only to a READY
		// template: one still building is refused and nothing moves.
		alias("tpl-pending", map[string]any{"alias": "two"}).named("alias moved to a template still building", notFound, "tpl-pending"),
		alias("tpl-seed", map[string]any{"alias": "tpl-two"}).named("alias shaped like an id", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "snap-1"}).named("alias shaped like a snapshot id", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "../x"}).named("alias traversal", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "%2e%2e"}).named("alias percent-encoded", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "a\\b"}).named("alias backslash", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "föo"}).named("alias not ASCII", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "foo\u0308"}).named("alias NFD", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "a\u202eb"}).named("alias RTL override", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "x\x00"}).named("alias NUL", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": "-x"}).named("alias leading dash", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": strings.Repeat("a", 65)}).named("alias of 65", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": 1}).named("alias as a number", bad, "alias"),
		alias("tpl-seed", map[string]any{"alias": []any{"a"}}).named("alias as an array", bad, "alias"),
		alias("nope", map[string]any{"alias": "fine"}).named("alias on an unknown template", notFound, "nope"),
		alias("%00", map[string]any{"alias": "fine"}).named("alias on a NUL id", bad, "template_id"),
		alias("..%2f..%2fetc", map[string]any{"alias": "fine"}).named("alias on a traversal id", bad, "template_id"),
		alias(long, map[string]any{"alias": "fine"}).named("alias on an id of 129", bad, "template_id"),

		post(PathTemplate, sandbox("", nil)).named("sandbox template without id", bad, "template id is required"),
		post(PathTemplate, map[string]any{"containers": []any{}}).named("sandbox template without annotations", bad, "template id is required"),
		post(PathTemplate, sandbox("../x", nil)).named("sandbox template traversal", bad, "template_id"),
		post(PathTemplate, sandbox(long, nil)).named("sandbox template id of 129", bad, "template_id"),
		post(PathTemplate, sandbox("tpl-seed", nil)).named("sandbox template over an existing one", bad, "already exists"),
		post(PathTemplate, sandbox("tpl-pending", nil)).named("sandbox template with an active job", conflict, ""),
		post(PathTemplate, sandbox("seed", nil)).named("sandbox template id held as an alias", conflict, "seed"),
		post(PathTemplate, sandbox("new-1", map[string]any{"distribution_scope": []any{"node-9"}})).named("sandbox template unknown node", bad, "node-9"),
		post(PathTemplate, sandbox("new-1", map[string]any{"instance_type": "gpu"})).named("sandbox template no nodes", bad, "no healthy template nodes"),
		post(PathTemplate, map[string]any{"annotations": "x"}).named("sandbox annotations as a string", bad, "annotations"),
		post(PathTemplate, map[string]any{"annotations": map[string]any{core.AnnotationTemplateID: 5}}).named("sandbox template id as a number", bad, ""),

		post(PathResolve, sandbox("nope", nil)).named("resolve unknown", notFound, "nope"),
		post(PathResolve, sandbox("", nil)).named("resolve without template", bad, "template id is required"),
		post(PathResolve, sandbox("tpl-pending", nil)).named("resolve a template not ready", notFound, ""),
		post(PathResolve, map[string]any{"annotations": []any{}}).named("resolve annotations as an array", bad, ""),
		post(PathPreview, sandbox("nope", nil)).named("preview unknown", notFound, "nope"),
		post(PathPreview, map[string]any{"annotations": map[string]any{"a": "b"}}).named("preview without containers", bad, "containers"),
		post(PathPreview, map[string]any{"containers": "x"}).named("preview containers as a string", bad, ""),

		get(PathFromImage+"?job_id="+url.QueryEscape("' OR 1=1 --")).named("job SQL", notFound, ""),
		get(PathFromImage+"?job_id="+strings.Repeat("j", 5000)).named("job id of 5000", notFound, ""),
		get(PathMigrate+"?job_id=..%2F..%2Fx").named("migrate job traversal", notFound, ""),
		get("/cube/template/build/%00/status").named("build NUL", notFound, ""),
		get("/cube/template/build/"+url.PathEscape("' OR 1=1")+"/status").named("build SQL", notFound, ""),
		get(PathTemplate+"?template_id=%00").named("template NUL", bad, "template_id"),
		get(PathTemplate+"?template_id=..%2F..%2Fetc").named("template traversal", bad, "template_id"),
		get(PathTemplate+"?template_id="+long).named("template id of 129", bad, "template_id"),
		get(PathTemplate+"?template_id=nope").named("template unknown", notFound, "nope"),
		get(PathResolve+"?template="+strings.Repeat("a", 5000)).named("resolve key of 5000", notFound, ""),
		get(PathResolve+"?template=%00").named("resolve NUL", notFound, ""),
		get(PathRootfsArtifact+"?artifact_id=..%2F..%2Fetc").named("artifact traversal", notFound, ""),
		get(PathRootfsArtifact+"?artifact_id="+url.QueryEscape("x' OR '1'='1")).named("artifact SQL", notFound, ""),
		get("/cube/no/such/route").status("unknown route", http.StatusNotFound, `"ret_code":130404`),
	}
	runAbuse(t, cases)
}

// TestAbuseCallback: the internal status callback refuses anything
// without the shared token, in any form, and bodies it cannot apply.
func TestAbuseCallback(t *testing.T) {
	e := newRealEnv(t)
	path := func(job string) string { return "/internal/template/jobs/" + job + "/status" }
	running := `{"status":"RUNNING","phase":"PULLING","progress":10}`
	cb := func(job, body string, hdr map[string]string) abuseCase {
		return abuseCase{method: http.MethodPost, target: path(job), body: body, header: hdr}
	}
	tok := map[string]string{auth.Header: testToken}
	cases := []abuseCase{
		cb(e.pendingJob, running, nil).status("no token", 401, "missing or invalid"),
		cb(e.pendingJob, running, map[string]string{auth.Header: ""}).status("empty token", 401, ""),
		cb(e.pendingJob, running, map[string]string{auth.Header: "wrong"}).status("wrong token", 401, ""),
		cb(e.pendingJob, running, map[string]string{auth.Header: testToken[:len(testToken)-1]}).status("token prefix", 401, ""),
		cb(e.pendingJob, running, map[string]string{auth.Header: testToken + "x"}).status("token with a suffix", 401, ""),
		cb(e.pendingJob, running, map[string]string{auth.Header: strings.ToUpper(testToken)}).status("token in other case", 401, ""),
		cb(e.pendingJob, running, map[string]string{auth.Header: " " + testToken}).status("token with a space", 401, ""),
		cb(e.pendingJob, running, map[string]string{"Authorization": "Bearer " + testToken}).status("token as a bearer", 401, ""),
		cb(e.pendingJob, running, map[string]string{"X-Cube-Template-Callback-Tokens": testToken}).status("token in another header", 401, ""),
		{name: "token in the query", method: http.MethodPost, target: path(e.pendingJob) + "?token=" + testToken, body: running, wantHTTP: 401},
		cb(e.pendingJob, running, map[string]string{auth.Header: "seed-download-token"}).status("a download token", 401, ""),
		cb("no-such-job", running, tok).status("unknown job", 404, ""),
		cb("..%2F..%2Fx", running, tok).status("traversal job id", 400, "job_id"),
		cb(strings.Repeat("j", 300), running, tok).status("job id of 300", 400, "job_id"),
		cb(e.pendingJob, "", tok).status("empty body", 400, "body"),
		cb(e.pendingJob, "{", tok).status("truncated body", 400, "body"),
		cb(e.pendingJob, "[]", tok).status("array body", 400, ""),
		cb(e.pendingJob, `{"status":"RUNNING"}{}`, tok).status("two values", 400, "unexpected data"),
		cb(e.pendingJob, `{"status":"NOPE"}`, tok).status("unknown status", 400, "status"),
		cb(e.pendingJob, `{"status":"RUNNING","phase":"NOPE"}`, tok).status("unknown phase", 400, "phase"),
		cb(e.pendingJob, `{"status":"RUNNING","phase":"PULLING","progress":"ten"}`, tok).status("progress as a string", 400, "progress"),
		cb(e.pendingJob, `{"status":"RUNNING","phase":"PULLING","pull_total_bytes":1e999}`, tok).status("overflowing counter", 400, ""),
		cb(e.pendingJob, `{"status":"RUNNING","x":"`+strings.Repeat("a", 2<<20)+`"}`, tok).status("2 MiB body", 413, "larger than"),
		cb(e.pendingJob, `{"status":"BUILT","phase":"READY","progress":100}`, tok).status("BUILT without an artifact", 400, ""),
		cb(e.pendingJob, `{"status":"READY","phase":"READY","progress":100}`, tok).status("READY from the data plane", 400, ""),
		cb(e.seedJob, `{"status":"FAILED","phase":"PULLING","error_message":"forged"}`, tok).status("failing a finished job", 200, `"applied":false`),
		cb(e.seedJob, running, tok).status("reviving a finished job", 200, `"applied":false`),
	}
	runAbuseOn(t, e, cases)
}

// runAbuseOn is runAbuse on one environment.
func runAbuseOn(t *testing.T, e *realEnv, cases []abuseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, out := e.snapshot(), e.outside()
			rec := doAbuse(e.h, tc)
			checkAnswer(t, rec, tc)
			if after := e.snapshot(); after != before {
				t.Errorf("rows changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if got := e.outside(); got != out {
				t.Errorf("calls left the master: %s, before %s", got, out)
			}
		})
	}
}

// TestAbuseCAKey: the CA's private key needs the shared token, and only
// the two listed names are served.
func TestAbuseCAKey(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"cube-root-ca.crt": "CERT", "cube-root-ca.key": "PRIVATE KEY", "other": "OTHER"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h, err := New(Config{Token: testToken, CADir: dir})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, hdr map[string]string) abuseCase {
		return abuseCase{method: http.MethodGet, target: "/cube/ca/" + name, header: hdr}
	}
	for _, tc := range []abuseCase{
		get("cube-root-ca.key", nil).status("key without token", 401, "token"),
		get("cube-root-ca.key", map[string]string{auth.Header: "wrong"}).status("key with a wrong token", 401, "token"),
		get("cube-root-ca.key", map[string]string{"Authorization": "Bearer " + testToken}).status("key with a bearer", 401, "token"),
		get("other", nil).status("unlisted file", 404, "filename"),
		get("..%2F..%2Fetc%2Fpasswd", nil).status("traversal", 404, ""),
		get("cube-root-ca.crt%00", nil).status("NUL suffix", 404, ""),
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := doAbuse(h, tc)
			if rec.Code != tc.wantHTTP || strings.Contains(rec.Body.String(), "PRIVATE KEY") || strings.Contains(rec.Body.String(), "OTHER") {
				t.Fatalf("HTTP %d %q, want %d without the file", rec.Code, rec.Body.String(), tc.wantHTTP)
			}
		})
	}
}

// TestLocalLayoutIsTheDataPlanesDecision: an ocidir:// reference reads a
// layout on the data plane's disk, which only its operator can allow
// (CUBE_TEMPLATE_CENTER_ALLOW_LOCAL_LAYOUTS), so the master forwards it
// and the data plane decides (refused by default: the job fails with
// "local OCI layouts are not allowed", adapters/registry).
func TestLocalLayoutIsTheDataPlanesDecision(t *testing.T) {
	e := newRealEnv(t)
	rec := doAbuse(e.h, fromImage("source_image_ref", "ocidir:///var/layouts/app:v1"))
	if code, msg := envelopeOf(t, rec); code != 200 {
		t.Fatalf("ret_code %d %q", code, msg)
	}
	calls := e.dp.SubmitBuildCalls()
	if got := calls[len(calls)-1].Req.Request.SourceImageRef; got != "ocidir:///var/layouts/app:v1" {
		t.Fatalf("forwarded %q", got)
	}
}

// TestDuplicateKeysLastWins: a body with a key twice is read as
// encoding/json and upstream's decoder read it, the last value winning
// (CubeAPI's flattened extra fields can repeat a key); the value that
// wins is the one validated.
func TestDuplicateKeysLastWins(t *testing.T) {
	e := newRealEnv(t)
	body := `{"requestID":"r","source_image_ref":"registry.example/ok:1","source_image_ref":"file:///etc/passwd","writable_layer_size":"1Gi","template_id":"tpl-dup"}`
	before := e.snapshot()
	rec := doAbuse(e.h, abuseCase{method: http.MethodPost, target: PathFromImage, body: body})
	if code, msg := envelopeOf(t, rec); code != bad || !strings.Contains(msg, "file") {
		t.Fatalf("ret_code %d %q, want the last source_image_ref refused", code, msg)
	}
	if e.snapshot() != before {
		t.Fatal("rows changed")
	}
}
