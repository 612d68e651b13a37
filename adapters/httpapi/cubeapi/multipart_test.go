package cubeapi

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
)

// elfEnvd is a stand-in envd binary (ELF magic and a body).
var elfEnvd = append([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1}, bytes.Repeat([]byte("envd"), 100)...)

const injectRequest = `{"requestID":"r-mp","source_image_ref":"nginx:1","writable_layer_size":"2Gi","alias":"web",` +
	`"with_cube_ca":true,"enable_ivshmem":true,"container_overrides":{"annotations":{"cube.master.inject_envd":"true"}}}`

// upstreamForm writes the body upstream's cubemastercli sends for
// create-from-image --enable-inject-envd --envd-path F
// (buildCreateFromImageMultipartBody): the JSON request as the "request"
// form field, then the binary as the "envd" file part named "envd".
func upstreamForm(t *testing.T, request string, envd []byte, extra func(*multipart.Writer)) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if request != "" {
		fw, err := mw.CreateFormField("request")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(request))
	}
	if envd != nil {
		fw, err := mw.CreateFormFile("envd", "envd")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(envd)
	}
	if extra != nil {
		extra(mw)
	}
	mw.Close()
	return b.String(), mw.FormDataContentType()
}

func TestMultipartCreateFromImage(t *testing.T) {
	form, ctype := upstreamForm(t, injectRequest, elfEnvd, nil)
	// formOf is a form and the headers that go with it, X-Caller included.
	formOf := func(request string, envd []byte, extra func(*multipart.Writer)) (string, map[string]string) {
		b, ct := upstreamForm(t, request, envd, extra)
		return b, map[string]string{"Content-Type": ct, "X-Caller": "x"}
	}
	noRequest, noRequestHdr := formOf("", elfEnvd, nil)
	typeErr, typeErrHdr := formOf(`{"requestID":"r","writable_layer_size":20}`, nil, nil)
	twice, twiceHdr := formOf(injectRequest, nil, func(mw *multipart.Writer) { mw.WriteField("request", injectRequest) })
	huge, hugeHdr := formOf(injectRequest, make([]byte, core.MaxEnvdBytes+1), nil)
	other, otherHdr := formOf(injectRequest, elfEnvd, func(mw *multipart.Writer) { mw.WriteField("note", "hi") })
	tests := []struct {
		name     string
		authOn   bool
		body     string
		hdr      map[string]string
		wantCode int
		wantMsg  string
		wantEnvd bool
	}{
		{name: "upstream cli, auth off", body: form, hdr: map[string]string{"Content-Type": ctype, "X-Caller": "mastercli"}, wantCode: 200, wantEnvd: true},
		{name: "a browser form, auth off", body: form, hdr: map[string]string{"Content-Type": ctype}, wantCode: 130400, wantMsg: "accepted only from an API client"},
		{name: "callback token", body: form, hdr: map[string]string{"Content-Type": ctype, auth.Header: testToken}, wantCode: 200, wantEnvd: true},
		{name: "bearer token, auth on", authOn: true, body: form, hdr: map[string]string{"Content-Type": ctype, "Authorization": "Bearer " + apiBearer}, wantCode: 200, wantEnvd: true},
		{name: "x-caller is no credential, auth on", authOn: true, body: form, hdr: map[string]string{"Content-Type": ctype, "X-Caller": "mastercli"}, wantCode: 130401},
		{name: "no request field", body: noRequest, hdr: noRequestHdr, wantCode: 130400, wantMsg: "request: the multipart field"},
		{name: "request field type error", body: typeErr, hdr: typeErrHdr, wantCode: 130400, wantMsg: "request.writable_layer_size: expected string"},
		{name: "request field twice", body: twice, hdr: twiceHdr, wantCode: 130400, wantMsg: "request: is given twice"},
		{name: "envd over 16 MiB", body: huge, hdr: hugeHdr, wantCode: 130400, wantMsg: "envd: larger than"},
		{name: "other parts are ignored", body: other, hdr: otherHdr, wantCode: 200, wantEnvd: true},
		{name: "json body still works", body: injectRequest, hdr: map[string]string{"Content-Type": "application/json"}, wantCode: 200},
		{name: "url-encoded form still refused", body: "requestID=r", hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-Caller": "x"},
			wantCode: 130400, wantMsg: "send the body as application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := &services{}
			h := newServer(t, svc, "")
			if tc.authOn {
				h = newAuthServer(t, svc, "")
			}
			rec := do(h, "POST", PathFromImage, tc.body, tc.hdr)
			if code := retCode(t, rec); code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantMsg) {
				t.Fatalf("ret_code %d, want %d with %q: %s", code, tc.wantCode, tc.wantMsg, rec.Body.String())
			}
			if tc.wantCode != 200 {
				if len(svc.calls) != 0 {
					t.Fatalf("refused request reached the service: %v", svc.calls)
				}
				return
			}
			req := svc.last.(*core.FromImageRequest)
			if req.RequestID == "" || req.Alias != "web" || req.EnableIvshmem == nil || !*req.EnableIvshmem ||
				req.ContainerOverrides.Annotations[core.AnnotationInjectEnvd] != "true" {
				t.Fatalf("request %+v", req)
			}
			if got := bytes.Equal(svc.envd, elfEnvd); got != tc.wantEnvd || (!tc.wantEnvd && svc.envd != nil) {
				t.Fatalf("service got %d envd bytes, want the upload: %v", len(svc.envd), tc.wantEnvd)
			}
		})
	}
}

// TestMultipartOnlyOnCreate: the other JSON routes still refuse form
// bodies, whatever header comes with them.
func TestMultipartOnlyOnCreate(t *testing.T) {
	svc := &services{}
	h := newServer(t, svc, "")
	form, ctype := upstreamForm(t, `{"requestID":"r","template_id":"tpl-1"}`, nil, nil)
	for _, path := range []string{PathRedo, PathMigrate, PathTemplate} {
		rec := do(h, "POST", path, form, map[string]string{"Content-Type": ctype, "X-Caller": "mastercli"})
		if code := retCode(t, rec); code != 130400 || len(svc.calls) != 0 {
			t.Fatalf("%s: ret_code %d calls %v: %s", path, code, svc.calls, rec.Body.String())
		}
	}
}

// TestNoCORSPreflightIsGranted: a page on another origin that tries to add
// X-Caller (or a credential) to a form post must first pass a CORS
// preflight; the API never grants one, so the browser never sends it.
func TestNoCORSPreflightIsGranted(t *testing.T) {
	h := newServer(t, &services{}, "")
	req := httptest.NewRequest(http.MethodOptions, PathFromImage, nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-caller")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for k := range rec.Header() {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Fatalf("preflight answered with %s: %v", k, rec.Header())
		}
	}
}
