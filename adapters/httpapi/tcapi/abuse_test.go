package tcapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// recordingRunner is the build pipeline: it records what it was asked to
// build and builds nothing.
type recordingRunner struct {
	mu   sync.Mutex
	runs []string
}

func (r *recordingRunner) Run(_ context.Context, in pipeline.Input, _ func(pipeline.Event)) (*pipeline.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, in.Request.Request().SourceImageRef)
	return nil, fmt.Errorf("this test builds nothing")
}

func (r *recordingRunner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// dpEnv is the data plane's router wired to a real build executor over
// the memory store (so the build route runs the executor's own
// validation), with a PENDING job to build and recording fakes for the
// rest.
type dpEnv struct {
	h       http.Handler
	store   *memstore.Store
	runner  *recordingRunner
	exec    *data.Executor
	deleter *fakeDeleter
	uploads *fakeRecorder
	objects ports.ArtifactStore
	lookup  *fakeLookup
	pending *core.Job
	req     *core.FromImageRequest
}

func newDPEnv(t *testing.T) *dpEnv {
	t.Helper()
	ctx := context.Background()
	e := &dpEnv{store: memstore.New(), runner: &recordingRunner{}, deleter: &fakeDeleter{}, uploads: &fakeRecorder{}, objects: fileStore(t)}
	e.req = &core.FromImageRequest{RequestID: "r", SourceImageRef: "registry.example/app:1", TemplateID: "tpl-b", WritableLayerSize: "20Gi"}
	n, err := core.NormalizeFromImageRequest(e.req, nil)
	if err != nil {
		t.Fatal(err)
	}
	rj, err := core.CanonicalRequestJSON(n)
	if err != nil {
		t.Fatal(err)
	}
	e.pending = &core.Job{JobID: "job-pending", TemplateID: "tpl-b", AttemptNo: 1, Operation: core.OpCreate, Status: core.JobPending,
		Phase: core.PhasePulling, RequestJSON: rj, ActiveKey: core.ActiveKeyFromImage("tpl-b"),
		InstanceType: e.req.InstanceType, NetworkType: e.req.NetworkType, WritableLayerSize: e.req.WritableLayerSize, SourceImageRef: e.req.SourceImageRef}
	if err := e.store.Jobs().Create(ctx, e.pending); err != nil {
		t.Fatal(err)
	}
	done := &core.Job{JobID: "job-done", TemplateID: "tpl-c", AttemptNo: 1, Operation: core.OpCreate, Status: core.JobReady, Phase: core.PhaseReady, RequestJSON: rj}
	if err := e.store.Jobs().Create(ctx, done); err != nil {
		t.Fatal(err)
	}
	e.exec = &data.Executor{Store: e.store, Locker: memlock.New(), Pipeline: e.runner, Artifacts: e.objects,
		Reporter: &portsmock.StatusReporterMock{ReportFunc: func(context.Context, string, ports.StatusReport) error { return nil }},
		Config:   data.ExecutorConfig{MaxConcurrent: 1}}
	t.Cleanup(func() { _ = e.exec.Shutdown(context.Background()) })
	data1 := []byte(strings.Repeat("ext4", 2500))
	put(t, e.objects, core.ArtifactObjectKey("rfs-a"), data1)
	put(t, e.objects, core.ArtifactObjectKey("rfs-b"), data1[:5000])
	e.lookup = &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-a": {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: "token-a", Ext4SHA256: sum(data1), Ext4SizeBytes: int64(len(data1))},
		"rfs-b": {ArtifactID: "rfs-b", Status: core.ArtifactReady, DownloadToken: "token-b", Ext4SHA256: sum(data1[:5000]), Ext4SizeBytes: 5000},
		"rfs-c": {ArtifactID: "rfs-c", Status: core.ArtifactBuilding, DownloadToken: "token-c"},
		// Recorded, no bytes yet: an upload must match the record.
		"rfs-d": {ArtifactID: "rfs-d", Status: core.ArtifactReady, Ext4SHA256: sum(data1), Ext4SizeBytes: int64(len(data1))},
	}}
	e.h = New(Config{Token: testToken, Builds: e.exec, Deleter: e.deleter, Artifacts: e.lookup, Store: e.objects, Uploads: e.uploads,
		MaxBodyBytes: 64 << 10, MaxBuildBodyBytes: 256 << 10, MaxUploadBytes: 1 << 20, SpoolDir: t.TempDir()})
	return e
}

// state is everything a refused request must leave alone.
func (e *dpEnv) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, id := range []string{"job-pending", "job-done"} {
		j, err := e.store.Jobs().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "job %+v\n", *j)
	}
	for _, id := range []string{"rfs-a", "rfs-b", "rfs-c", "rfs-d", "rfs-new", "x"} {
		info, err := e.objects.Stat(ctx, core.ArtifactObjectKey(id))
		fmt.Fprintf(&b, "object %s %+v %v\n", id, info, err)
	}
	fmt.Fprintf(&b, "runs=%d deletes=%v uploads=%d\n", e.runner.count(), e.deleter.got, len(e.uploads.got))
	return b.String()
}

type dpCase struct {
	name    string
	method  string
	target  string
	body    []byte
	header  map[string]string
	want    int
	wantMsg string
}

func (e *dpEnv) run(t *testing.T, cases []dpCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.state(t)
			req := httptest.NewRequest(tc.method, tc.target, bytes.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, req)
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.wantMsg) {
				t.Fatalf("HTTP %d %s, want %d with %q", rec.Code, short(rec.Body.Bytes()), tc.want, tc.wantMsg)
			}
			if rec.Code >= 400 && rec.Code != 416 && tc.method != http.MethodHead && rec.Body.Len() == 0 {
				t.Error("an error without a body")
			}
			for _, s := range []string{testToken, "token-a", "token-b"} {
				if strings.Contains(rec.Body.String(), s) {
					t.Errorf("the answer holds a secret: %s", short(rec.Body.Bytes()))
				}
			}
			if after := e.state(t); after != before {
				t.Errorf("state changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func tokenHeader() map[string]string {
	return map[string]string{auth.Header: testToken, "Content-Type": "application/json"}
}

func (e *dpEnv) build(edit func(m map[string]any)) []byte {
	var req map[string]any
	b, _ := json.Marshal(e.req)
	_ = json.Unmarshal(b, &req)
	m := map[string]any{"job_id": e.pending.JobID, "request": req}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return out
}

func setReq(k string, v any) func(map[string]any) {
	return func(m map[string]any) {
		if v == nil {
			delete(m["request"].(map[string]any), k)
			return
		}
		m["request"].(map[string]any)[k] = v
	}
}

// TestAbuseInternalRoutes: the build, delete and upload routes without the
// shared token, in any form, and with bodies the real executor refuses.
func TestAbuseInternalRoutes(t *testing.T) {
	e := newDPEnv(t)
	valid := e.build(func(map[string]any) {})
	post := func(path string, body []byte, hdr map[string]string) dpCase {
		return dpCase{method: http.MethodPost, target: path, body: body, header: hdr}
	}
	named := func(c dpCase, name string, want int, msg string) dpCase {
		c.name, c.want, c.wantMsg = name, want, msg
		return c
	}
	const build, del, upload = "/tc/api/v1/build", "/tc/api/v1/artifact/delete", "/tc/api/v1/artifact/upload"
	var cases []dpCase
	for _, path := range []string{build, del, upload} {
		for _, h := range []struct {
			name string
			hdr  map[string]string
		}{
			{"no token", nil},
			{"empty token", map[string]string{auth.Header: ""}},
			{"wrong token", map[string]string{auth.Header: "wrong"}},
			{"token prefix", map[string]string{auth.Header: testToken[:5]}},
			{"token in other case", map[string]string{auth.Header: strings.ToUpper(testToken)}},
			{"bearer token", map[string]string{"Authorization": "Bearer " + testToken}},
			{"download token", map[string]string{auth.Header: "token-a"}},
		} {
			cases = append(cases, named(post(path, valid, h.hdr), path+": "+h.name, 401, "missing or invalid"))
		}
		cases = append(cases, named(post(path+"?token="+testToken, valid, nil), path+": token in the query", 401, ""))
	}
	tok := tokenHeader()
	hex64 := strings.Repeat("ab", 32)
	cases = append(cases,
		named(post(build, nil, tok), "build: empty body", 400, "body"),
		named(post(build, []byte("{"), tok), "build: truncated", 400, "body"),
		named(post(build, []byte(`{"job_id":"job-pending"}{}`), tok), "build: two values", 400, "unexpected data"),
		named(post(build, []byte(`[]`), tok), "build: array", 400, ""),
		named(post(build, []byte(`{"job_id":"`+strings.Repeat("j", 300<<10)+`"}`), tok), "build: over the body cap", 413, "larger than"),
		named(post(build, e.build(func(m map[string]any) { m["job_id"] = "../../x" }), tok), "build: traversal job id", 400, "job_id"),
		named(post(build, e.build(func(m map[string]any) { m["job_id"] = "" }), tok), "build: no job id", 400, "job_id"),
		named(post(build, e.build(func(m map[string]any) { delete(m, "request") }), tok), "build: no request", 400, "request"),
		named(post(build, e.build(func(m map[string]any) { m["job_id"] = "job-unknown" }), tok), "build: unknown job", 404, ""),
		named(post(build, e.build(func(m map[string]any) { m["job_id"] = "job-done" }), tok), "build: finished job", 404, ""),
		named(post(build, e.build(setReq("source_image_ref", "file:///etc/passwd")), tok), "build: file URL", 400, "source_image_ref"),
		named(post(build, e.build(setReq("source_image_ref", "169.254.169.254/latest:x")), tok), "build: metadata address", 400, "source_image_ref"),
		named(post(build, e.build(setReq("source_image_ref", "alpine\x00")), tok), "build: NUL in the reference", 400, "source_image_ref"),
		named(post(build, e.build(setReq("source_image_ref", strings.Repeat("a", 10240))), tok), "build: 10 kB reference", 400, "source_image_ref"),
		named(post(build, e.build(setReq("source_image_ref", "registry.example/other:1")), tok), "build: another request than the job's", 400, "does not match"),
		named(post(build, e.build(setReq("writable_layer_size", "0")), tok), "build: zero writable layer", 400, "writable_layer_size"),
		named(post(build, e.build(setReq("template_id", "../x")), tok), "build: traversal template id", 400, "template_id"),
		named(post(build, e.build(setReq("exposed_ports", []any{70000})), tok), "build: port out of range", 400, "exposed_ports"),
		named(post(build, e.build(func(m map[string]any) { m["envd_sha256"] = "xyz" }), tok), "build: malformed envd sha256", 400, "envd_sha256"),
		named(post(build, e.build(func(m map[string]any) {
			m["envd_sha256"], m["envd_data"] = hex64, base64.StdEncoding.EncodeToString([]byte("envd"))
		}), tok), "build: envd not matching its sha256", 400, "envd_data"),
		named(post(build, e.build(func(m map[string]any) { m["envd_data"] = "!!not base64" }), tok), "build: envd not base64", 400, ""),

		named(post(del, []byte(`{"artifact_id":"../../etc"}`), tok), "delete: traversal id", 400, "artifact_id"),
		named(post(del, []byte(`{"artifact_id":""}`), tok), "delete: no id", 400, "artifact_id"),
		named(post(del, []byte(`{"artifact_id":"`+strings.Repeat("a", 300)+`"}`), tok), "delete: id of 300", 400, "artifact_id"),
		named(post(del, []byte(`{"artifact_id":7}`), tok), "delete: id as a number", 400, "artifact_id"),
		named(post(del, []byte(`{"artifact_id":"rfs-a"`), tok), "delete: truncated", 400, "body"),
		named(post(del, bytes.Repeat([]byte(" "), 70<<10), tok), "delete: over the body cap", 413, "larger than"),

		named(post(upload+"?artifact_id=../x&sha256="+hex64+"&size=4", []byte("ext4"), tok), "upload: traversal id", 400, "artifact_id"),
		named(post(upload+"?artifact_id=rfs-new&sha256=xyz&size=4", []byte("ext4"), tok), "upload: malformed sha256", 400, "sha256"),
		named(post(upload+"?artifact_id=rfs-new&sha256="+hex64+"&size=-4", []byte("ext4"), tok), "upload: negative size", 400, "size"),
		named(post(upload+"?artifact_id=rfs-new&sha256="+hex64+"&size=99999999999999999999", []byte("ext4"), tok), "upload: overflowing size", 400, "size"),
		named(post(upload+"?artifact_id=rfs-new&sha256="+hex64+"&size=5", []byte("ext4"), tok), "upload: size not the body's", 400, "size"),
		named(post(upload+"?artifact_id=rfs-new&sha256="+hex64+"&size="+fmt.Sprint(2<<20), nil, tok), "upload: over the cap", 400, "size"),
		named(post(upload+"?artifact_id=rfs-new&sha256="+hex64+"&size=4", []byte("ext4"), tok), "upload: unknown artifact", 404, "rfs-new"),
		named(post(upload+"?artifact_id=rfs-a&sha256="+hex64+"&size=4", []byte("ext4"), tok), "upload: another sha256 than the row's", 409, "records sha256"),
		named(post(upload+"?artifact_id=rfs-b&sha256="+sum([]byte("ext4"))+"&size=4", []byte("ext4"), tok), "upload: bytes of another artifact's sha", 409, ""),
	)
	for _, f := range []struct {
		name string
		body func(mw *multipart.Writer)
		want int
		msg  string
	}{
		{"form: no file part", func(mw *multipart.Writer) { mw.WriteField("artifact_id", "rfs-a") }, 400, "no file part"},
		{"form: file before the id", func(mw *multipart.Writer) {
			fw, _ := mw.CreateFormFile("file", "x.ext4")
			fw.Write([]byte("ext4"))
			mw.WriteField("artifact_id", "rfs-a")
		}, 400, "artifact_id"},
		{"form: traversal id", func(mw *multipart.Writer) {
			mw.WriteField("artifact_id", "../../etc/passwd")
			fw, _ := mw.CreateFormFile("file", "x.ext4")
			fw.Write([]byte("ext4"))
		}, 400, "artifact_id"},
		{"form: id of 600", func(mw *multipart.Writer) {
			mw.WriteField("artifact_id", strings.Repeat("a", 600))
			fw, _ := mw.CreateFormFile("file", "x.ext4")
			fw.Write([]byte("ext4"))
		}, 400, "artifact_id"},
		{"form: file name traversal, wrong bytes", func(mw *multipart.Writer) {
			mw.WriteField("artifact_id", "rfs-d")
			fw, _ := mw.CreateFormFile("file", "../../../etc/cron.d/x")
			fw.Write([]byte("not the recorded bytes"))
		}, 400, ""},
		{"form: empty file of an unrecorded artifact", func(mw *multipart.Writer) {
			mw.WriteField("artifact_id", "rfs-c")
			mw.CreateFormFile("file", "x.ext4")
		}, 400, "empty"},
		{"form: unknown artifact", func(mw *multipart.Writer) {
			mw.WriteField("artifact_id", "rfs-new")
			fw, _ := mw.CreateFormFile("file", "x.ext4")
			fw.Write([]byte("ext4"))
		}, 404, ""},
	} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		f.body(mw)
		mw.Close()
		hdr := map[string]string{auth.Header: testToken, "Content-Type": mw.FormDataContentType()}
		cases = append(cases, named(post(upload, buf.Bytes(), hdr), "upload "+f.name, f.want, f.msg))
	}
	cases = append(cases,
		named(post(upload, []byte("--x\r\nbroken"), map[string]string{auth.Header: testToken, "Content-Type": "multipart/form-data; boundary=x"}), "upload form: truncated", 400, ""),
		named(post(upload, []byte("x"), map[string]string{auth.Header: testToken, "Content-Type": "multipart/form-data"}), "upload form: no boundary", 400, "multipart"),
	)
	e.run(t, cases)

	// With no token configured (and no insecure opt-in) nothing is served.
	open := New(Config{Builds: e.exec, Deleter: e.deleter, Store: e.objects})
	for _, path := range []string{build, del, upload} {
		rec := httptest.NewRecorder()
		open.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(valid)))
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("%s without a configured token: %d", path, rec.Code)
		}
	}
	if e.runner.count() != 0 || len(e.deleter.got) != 0 {
		t.Fatalf("refused requests reached the executor or the deleter: %d runs, deletes %v", e.runner.count(), e.deleter.got)
	}
}

// TestAbuseDownloads: tokens of other artifacts and hostile Range headers.
func TestAbuseDownloads(t *testing.T) {
	e := newDPEnv(t)
	get := func(id, token string, hdr map[string]string) dpCase {
		return dpCase{method: http.MethodGet, target: dlURL(id, token), header: hdr}
	}
	named := func(c dpCase, name string, want int, msg string) dpCase {
		c.name, c.want, c.wantMsg = name, want, msg
		return c
	}
	rng := func(r string) map[string]string { return map[string]string{"Range": r} }
	ranges := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("%d-%d", i*2, i*2)
		}
		return "bytes=" + strings.Join(parts, ",")
	}
	cases := []dpCase{
		named(get("rfs-a", "token-b", nil), "token of another artifact", 403, "token"),
		named(get("rfs-b", "token-a", nil), "token of another artifact, the other way", 403, "token"),
		named(get("rfs-a", "", map[string]string{"X-Cube-Download-Token": "token-b"}), "header token of another artifact", 403, "token"),
		named(get("rfs-a", "TOKEN-A", nil), "token in other case", 403, ""),
		named(get("rfs-a", "token-a%20", nil), "token with a space", 403, ""),
		named(get("rfs-a", "token-", nil), "token prefix", 403, ""),
		named(get("rfs-a", testToken, nil), "the callback token", 403, ""),
		named(get("rfs-c", "token-c", nil), "artifact not ready", 404, "not ready"),
		named(get("rfs-none", "token-a", nil), "unknown artifact", 403, "token"),
		named(get("rfs-none", "", map[string]string{auth.Header: testToken}), "unknown artifact, internal token", 404, "not found"),
		named(get("..%2F..%2Fetc%2Fpasswd", "token-a", nil), "traversal id", 400, ""),
		named(get("rfs-a%00", "token-a", nil), "NUL id", 400, ""),
		named(get("rfs-a", "token-a", rng(ranges(17))), "17 ranges", 416, "at most 16"),
		named(get("rfs-a", "token-a", rng(ranges(500))), "500 ranges", 416, "at most 16"),
		named(get("rfs-a", "token-a", rng("bytes="+strings.Repeat("0-,", 400)+"0-")), "401 overlapping whole ranges", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=99999999999999999999-")), "overflowing start", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=0-99999999999999999999")), "overflowing end", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=-99999999999999999999")), "overflowing suffix", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=20000-")), "start past the end", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=5-1")), "end before start", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=-5-10")), "negative start", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=--1")), "double minus", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=-0")), "empty suffix: unsatisfiable (RFC 9110; net/http: an empty 206)", 416, "suffix range of zero bytes"),
		named(get("rfs-a", "token-a", rng("bytes=-000")), "empty suffix with zeros", 416, "suffix range of zero bytes"),
		named(get("rfs-a", "token-a", rng("bytes=-0, 0-1")), "empty suffix beside a range", 206, ""),
		named(get("rfs-a", "token-a", map[string]string{"Range": "bytes=-0", "If-Range": `"stale"`}), "empty suffix, stale If-Range", 200, ""),
		named(get("rfs-a", "token-a", rng("bytes=")), "no range (net/http: the whole body)", 200, ""),
		named(get("rfs-a", "token-a", rng("items=0-1")), "another unit", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=a-b")), "letters", 416, ""),
		named(get("rfs-a", "token-a", rng("bytes=0x10-0x20")), "hex", 416, ""),
		named(get("rfs-none", "token-a", rng(ranges(500))), "ranges on an unknown artifact", 403, ""),
		named(get("rfs-a", "token-b", rng(ranges(500))), "ranges with another's token", 403, ""),
	}
	e.run(t, cases)

	// Up to 16 ranges are served; a garbage If-Range gives the whole body.
	for _, tc := range []struct {
		name, rng string
		want      int
	}{{"16 ranges", ranges(16), 206}, {"If-Range garbage", "bytes=0-0", 200}} {
		req := httptest.NewRequest(http.MethodGet, dlURL("rfs-a", "token-a"), nil)
		req.Header.Set("Range", tc.rng)
		if tc.name == "If-Range garbage" {
			req.Header.Set("If-Range", "\x00garbage")
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.want)
		}
	}
}

// TestUploadBodyReadsAreIdleBounded: behind a server with a read timeout
// far shorter than the upload, an upload that keeps sending completes
// (its reads are bounded by the idle timeout instead), and one that stops
// sending is cut off by that idle timeout.
func TestUploadBodyReadsAreIdleBounded(t *testing.T) {
	data := bytes.Repeat([]byte("e"), 4000)
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-up": {ArtifactID: "rfs-up", Status: core.ArtifactReady, Ext4SHA256: sum(data), Ext4SizeBytes: int64(len(data))},
	}}
	store := fileStore(t)
	h := New(Config{Token: testToken, Artifacts: lookup, Store: store, UploadIdleTimeout: 300 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 200 * time.Millisecond}
	go srv.Serve(ln)
	defer srv.Close()
	send := func(stopAfter int) (*http.Response, error) {
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < len(data); i += 200 {
				if i >= stopAfter {
					time.Sleep(5 * time.Second) // stalls: the idle timeout must end it
					break
				}
				time.Sleep(40 * time.Millisecond)
				if _, err := pw.Write(data[i : i+200]); err != nil {
					return
				}
			}
			pw.Close()
		}()
		u := fmt.Sprintf("http://%s/tc/api/v1/artifact/upload?artifact_id=rfs-up&sha256=%s&size=%d", ln.Addr(), sum(data), len(data))
		req, _ := http.NewRequest(http.MethodPost, u, pr)
		req.ContentLength = int64(len(data))
		req.Header.Set(auth.Header, testToken)
		req.Header.Set("Content-Type", "application/octet-stream")
		return http.DefaultClient.Do(req)
	}
	resp, err := send(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a steady upload longer than the read timeout: %d %s", resp.StatusCode, b)
	}
	if err := store.Delete(context.Background(), core.ArtifactObjectKey("rfs-up")); err != nil {
		t.Fatal(err)
	}
	resp, err = send(1000)
	if err == nil {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("a stalled upload was accepted: %s", b)
		}
	}
	if _, err := store.Stat(context.Background(), core.ArtifactObjectKey("rfs-up")); err == nil {
		t.Fatal("the stalled upload's bytes were stored")
	}
}
