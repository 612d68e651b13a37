package tcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
)

func uploadReq(id, sha string, body io.Reader, size string, contentLength int64) *http.Request {
	target := "/tc/api/v1/artifact/upload?artifact_id=" + id + "&sha256=" + sha
	if size != "" {
		target += "&size=" + size
	}
	req := httptest.NewRequest(http.MethodPost, target, body)
	req.ContentLength = contentLength
	req.Header.Set(auth.Header, testToken)
	req.Header.Set("Content-Type", "application/octet-stream")
	return req
}

func TestUpload(t *testing.T) {
	data := bytes.Repeat([]byte("ext4"), 3000)
	sha := sum(data)
	other := bytes.Repeat([]byte("xt4e"), 3000)
	n := int64(len(data))
	tests := []struct {
		name       string
		id, sha    string
		body       []byte
		size       string
		cl         int64
		preexist   []byte // stored under the key before the upload
		row        *core.Artifact
		recErr     error
		want       int
		wantStatus string // response "status" on 200
		wantStored []byte // nil: nothing stored
		wantRecord bool
	}{
		{name: "stored and recorded", id: "rfs-1", sha: sha, body: data, cl: n, want: 200, wantStatus: "uploaded", wantStored: data, wantRecord: true},
		{name: "uppercase sha and explicit size", id: "rfs-1", sha: strings.ToUpper(sha), body: data, size: fmt.Sprint(n), cl: n, want: 200, wantStatus: "uploaded", wantStored: data, wantRecord: true},
		{name: "chunked with size query", id: "rfs-1", sha: sha, body: data, size: fmt.Sprint(n), cl: -1, want: 200, wantStatus: "uploaded", wantStored: data, wantRecord: true},
		{name: "identical bytes already there", id: "rfs-1", sha: sha, body: data, cl: n, preexist: data, want: 200, wantStatus: "exists", wantStored: data, wantRecord: true},
		{name: "different bytes already there", id: "rfs-1", sha: sha, body: data, cl: n, preexist: other, want: 409, wantStored: other},
		{name: "row records another sha", id: "rfs-1", sha: sha, body: data, cl: n, row: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: sum(other)}, want: 409},
		{name: "row with empty sha accepts", id: "rfs-1", sha: sha, body: data, cl: n, row: &core.Artifact{ArtifactID: "rfs-1"}, want: 200, wantStatus: "uploaded", wantStored: data, wantRecord: true},
		{name: "unknown artifact", id: "rfs-none", sha: sha, body: data, cl: n, row: &core.Artifact{ArtifactID: "rfs-1"}, want: 404},
		{name: "body does not match sha", id: "rfs-1", sha: sha, body: other, cl: n, want: 400},
		{name: "body shorter than size", id: "rfs-1", sha: sha, body: data[:100], size: fmt.Sprint(n), cl: -1, want: 400},
		{name: "body longer than size", id: "rfs-1", sha: sha, body: append(bytes.Clone(data), 'x'), size: fmt.Sprint(n), cl: -1, want: 400},
		{name: "size disagrees with content length", id: "rfs-1", sha: sha, body: data, size: "5", cl: n, want: 400},
		{name: "no size at all", id: "rfs-1", sha: sha, body: data, cl: -1, want: 400},
		{name: "bad size", id: "rfs-1", sha: sha, body: data, size: "-3", cl: -1, want: 400},
		{name: "over the cap", id: "rfs-1", sha: sha, body: data, size: fmt.Sprint(int64(1) << 40), cl: -1, want: 413},
		{name: "bad sha", id: "rfs-1", sha: "abc", body: data, cl: n, want: 400},
		{name: "bad id", id: "..", sha: sha, body: data, cl: n, want: 400},
		{name: "recorder fails", id: "rfs-1", sha: sha, body: data, cl: n, recErr: errors.New("db"), want: 500, wantStored: data, wantRecord: true},
		{name: "row records another size", id: "rfs-1", sha: sha, body: data, cl: n, row: &core.Artifact{ArtifactID: "rfs-1", Ext4SizeBytes: n + 1}, want: 409},
		// The row changed between the check and the record: the bytes go.
		{name: "recorder refuses", id: "rfs-1", sha: sha, body: data, cl: n, recErr: fmt.Errorf("size: %w", core.ErrConflict), want: 409, wantRecord: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := fileStore(t)
			key := core.ArtifactObjectKey("rfs-1")
			if tc.preexist != nil {
				put(t, st, key, tc.preexist)
			}
			rec := &fakeRecorder{err: tc.recErr}
			cfg := Config{Token: testToken, Store: st, Uploads: rec, MaxUploadBytes: 1 << 30}
			if tc.row != nil {
				cfg.Artifacts = &fakeLookup{rows: map[string]*core.Artifact{tc.row.ArtifactID: tc.row}}
			}
			resp := httptest.NewRecorder()
			New(cfg).ServeHTTP(resp, uploadReq(tc.id, tc.sha, bytes.NewReader(tc.body), tc.size, tc.cl))
			if resp.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.Code, tc.want, resp.Body.String())
			}
			if tc.want == 200 {
				m := jsonBody(t, resp)
				if m["status"] != tc.wantStatus || m["object_key"] != key || m["storage_backend"] != "file" || m["sha256"] != sha {
					t.Fatalf("answer %v", m)
				}
			}
			info, err := st.Stat(context.Background(), key)
			switch {
			case tc.wantStored == nil && !errors.Is(err, core.ErrNotFound):
				t.Fatalf("something was stored: %+v %v", info, err)
			case tc.wantStored != nil && (err != nil || info.SHA256 != sum(tc.wantStored)):
				t.Fatalf("stored %+v %v, want sha %s", info, err, sum(tc.wantStored))
			}
			if (len(rec.got) == 1) != tc.wantRecord {
				t.Fatalf("recorder calls %+v", rec.got)
			}
			if tc.wantRecord {
				want := core.UploadedArtifact{ArtifactID: "rfs-1", ObjectKey: key, StorageBackend: "file", SHA256: sha, SizeBytes: n}
				if rec.got[0] != want {
					t.Fatalf("recorded %+v, want %+v", rec.got[0], want)
				}
			}
		})
	}
}

// A refused upload does not read the body, so a client using
// "Expect: 100-continue" never sends it.
func TestUploadRefusalDoesNotReadBody(t *testing.T) {
	st := fileStore(t)
	body := &countingReader{r: strings.NewReader("data")}
	resp := httptest.NewRecorder()
	cfg := Config{Token: testToken, Store: st, Artifacts: &fakeLookup{rows: map[string]*core.Artifact{}}}
	New(cfg).ServeHTTP(resp, uploadReq("rfs-1", sum([]byte("data")), body, "", 4))
	if resp.Code != 404 || body.n != 0 {
		t.Fatalf("status %d, %d body bytes read", resp.Code, body.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// An upload the artifact row refuses stores nothing under the key, so the
// right bytes can still be uploaded afterwards (an object once stored is
// never replaced by other bytes). Both upload forms, against the real
// recorder.
func TestRefusedUploadDoesNotBlockTheRightOne(t *testing.T) {
	good := bytes.Repeat([]byte("ext4"), 3000)
	bad := []byte("wrong")
	raw := func(t *testing.T, b []byte) *http.Request {
		return uploadReq("rfs-1", sum(b), bytes.NewReader(b), "", int64(len(b)))
	}
	form := func(t *testing.T, b []byte) *http.Request { return formUpload(t, "rfs-1", b, true) }
	for _, tc := range []struct {
		name    string
		row     core.Artifact
		req     func(*testing.T, []byte) *http.Request
		wantBad int // the wrong upload's status
	}{
		{"raw, row records the size only", core.Artifact{Ext4SizeBytes: int64(len(good))}, raw, http.StatusConflict},
		{"raw, row records size and sha", core.Artifact{Ext4SizeBytes: int64(len(good)), Ext4SHA256: sum(good)}, raw, http.StatusConflict},
		{"form, row records the size only", core.Artifact{Ext4SizeBytes: int64(len(good))}, form, http.StatusConflict},
		// Streamed against the row's sha256 and size: the store refuses it.
		{"form, row records size and sha", core.Artifact{Ext4SizeBytes: int64(len(good)), Ext4SHA256: sum(good)}, form, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := memstore.New()
			row := tc.row
			row.ArtifactID, row.Fingerprint, row.Status = "rfs-1", "fp1", core.ArtifactReady
			if err := db.Artifacts().Create(ctx, &row); err != nil {
				t.Fatal(err)
			}
			st := fileStore(t)
			h := New(Config{Token: testToken, Store: st, Artifacts: db.Artifacts(), Uploads: data.UploadRecorder{Artifacts: db.Artifacts()},
				MaxUploadBytes: 1 << 30, SpoolDir: t.TempDir()})
			key := core.ArtifactObjectKey("rfs-1")

			resp := httptest.NewRecorder()
			h.ServeHTTP(resp, tc.req(t, bad))
			if resp.Code != tc.wantBad {
				t.Fatalf("wrong upload: %d %s, want %d", resp.Code, resp.Body.String(), tc.wantBad)
			}
			if info, err := st.Stat(ctx, key); !errors.Is(err, core.ErrNotFound) {
				t.Fatalf("the refused upload left %+v (%v) under the key", info, err)
			}
			resp = httptest.NewRecorder()
			h.ServeHTTP(resp, tc.req(t, good))
			if resp.Code != http.StatusOK {
				t.Fatalf("right upload after a refused one: %d %s", resp.Code, resp.Body.String())
			}
			if info, err := st.Stat(ctx, key); err != nil || info.SHA256 != sum(good) {
				t.Fatalf("stored %+v %v, want sha %s", info, err, sum(good))
			}
		})
	}
}
