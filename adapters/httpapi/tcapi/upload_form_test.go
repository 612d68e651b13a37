package tcapi

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
)

// formUpload builds the body upstream master's tcclient UploadArtifact
// sends: the artifact_id field, then the file part named "file".
func formUpload(t *testing.T, id string, data []byte, idFirst bool) *http.Request {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	field := func() {
		if err := mw.WriteField("artifact_id", id); err != nil {
			t.Fatal(err)
		}
	}
	if idFirst {
		field()
	}
	if data != nil {
		fw, err := mw.CreateFormFile("file", id+".ext4")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(data)
	}
	if !idFirst {
		field()
	}
	mw.Close()
	req := httptest.NewRequest(http.MethodPost, "/tc/api/v1/artifact/upload", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set(auth.Header, testToken)
	return req
}

func TestUploadInUpstreamForm(t *testing.T) {
	data := bytes.Repeat([]byte("ext4"), 2000)
	other := bytes.Repeat([]byte("xt4e"), 2000)
	n := int64(len(data))
	tests := []struct {
		name       string
		row        *core.Artifact
		body       []byte
		idFirst    bool
		preexist   []byte
		want       int
		wantStatus string
	}{
		{name: "verified against the row", row: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: sum(data), Ext4SizeBytes: n}, body: data, idFirst: true, want: 200, wantStatus: "uploaded"},
		{name: "row without sha: spooled and hashed", row: &core.Artifact{ArtifactID: "rfs-1"}, body: data, idFirst: true, want: 200, wantStatus: "uploaded"},
		{name: "no row lookup configured", body: data, idFirst: true, want: 200, wantStatus: "uploaded"},
		{name: "already stored", row: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: sum(data), Ext4SizeBytes: n}, body: data, idFirst: true, preexist: data, want: 200, wantStatus: "exists"},
		{name: "bytes differ from the row", row: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: sum(data), Ext4SizeBytes: n}, body: other, idFirst: true, want: 400},
		{name: "other bytes already stored", body: data, idFirst: true, preexist: other, want: 409},
		{name: "unknown artifact", row: &core.Artifact{ArtifactID: "rfs-x"}, body: data, idFirst: true, want: 404},
		{name: "file before the id", body: data, idFirst: false, want: 400},
		{name: "no file", idFirst: true, want: 400},
		{name: "empty file", body: []byte{}, idFirst: true, want: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := fileStore(t)
			root := t.TempDir()
			key := core.ArtifactObjectKey("rfs-1")
			if tc.preexist != nil {
				put(t, st, key, tc.preexist)
			}
			rec := &fakeRecorder{}
			cfg := Config{Token: testToken, Store: st, Uploads: rec, MaxUploadBytes: 1 << 30, SpoolDir: t.TempDir(),
				LocalPath: func(k string) string { return filepath.Join(root, k) }}
			if tc.row != nil {
				cfg.Artifacts = &fakeLookup{rows: map[string]*core.Artifact{tc.row.ArtifactID: tc.row}}
			}
			resp := httptest.NewRecorder()
			New(cfg).ServeHTTP(resp, formUpload(t, "rfs-1", tc.body, tc.idFirst))
			if resp.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.Code, tc.want, resp.Body.String())
			}
			if tc.want != 200 {
				return
			}
			m := jsonBody(t, resp)
			// The fields upstream's master reads, and ours.
			if m["status"] != tc.wantStatus || m["artifact_id"] != "rfs-1" || m["ext4_sha256"] != sum(data) ||
				m["ext4_size_bytes"] != float64(n) || m["ext4_path"] != filepath.Join(root, "rfs-1", "rfs-1.ext4") ||
				m["sha256"] != sum(data) || m["object_key"] != key {
				t.Fatalf("answer %v", m)
			}
			rc, err := st.Open(context.Background(), key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, data) {
				t.Fatal("stored bytes differ")
			}
			if len(rec.got) != 1 || rec.got[0].SHA256 != sum(data) || rec.got[0].SizeBytes != n {
				t.Fatalf("recorded %+v", rec.got)
			}
		})
	}
}

func TestUploadFormNeedsTheToken(t *testing.T) {
	req := formUpload(t, "rfs-1", []byte("x"), true)
	req.Header.Del(auth.Header)
	resp := httptest.NewRecorder()
	New(Config{Token: testToken, Store: fileStore(t)}).ServeHTTP(resp, req)
	if resp.Code != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.Code)
	}
}
