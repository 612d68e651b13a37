package wire

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestParseBaseURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"http://127.0.0.1:8090", "http://127.0.0.1:8090", true},
		{"http://127.0.0.1:8090/", "http://127.0.0.1:8090", true},
		{"https://tc.internal/prefix/", "https://tc.internal/prefix", true},
		{"cube-template-center:8090", "http://cube-template-center:8090", true},
		{" http://h:1 ", "http://h:1", true},
		{"", "", false},
		{"ftp://h", "", false},
		{"http://user:pw@h:1", "", false},
		{"http://h:1?x=1", "", false},
		{"http://", "", false},
	}
	for _, tc := range tests {
		got, err := ParseBaseURL("addr", tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBaseURL(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error leaks credentials: %v", err)
		}
	}
}

func TestStatusError(t *testing.T) {
	tests := []struct {
		code      int
		body      string
		is        error
		retryable bool
		msg       string
	}{
		{400, `{"error":"job_id: is required"}`, core.ErrInvalidArgument, false, "job_id: is required"},
		{401, `{"error":"missing or invalid token"}`, ErrUnauthorized, false, "missing or invalid token"},
		{404, `{"error":"job j not found"}`, core.ErrNotFound, false, "job j not found"},
		{409, `{"error":"in flight"}`, core.ErrConflict, false, "in flight"},
		{429, `{"error":"cap"}`, core.ErrBusy, true, "cap"},
		{503, `{"error":"no executor"}`, ErrUnavailable, true, "no executor"},
		{502, "<html>bad gateway</html>", nil, true, "<html>bad gateway</html>"},
	}
	for _, tc := range tests {
		resp := &http.Response{StatusCode: tc.code, Body: io.NopCloser(strings.NewReader(tc.body))}
		err := ReadStatusError("submit build j", resp)
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%d: %v is not %v", tc.code, err, tc.is)
		}
		if err.Retryable() != tc.retryable || err.Message != tc.msg || !strings.HasPrefix(err.Error(), "submit build j: HTTP") {
			t.Errorf("%d: %+v (%v)", tc.code, err, err)
		}
	}
}
