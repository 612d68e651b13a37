package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestCodeFor(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("job j-1: %w", err) }
	tests := []struct {
		err  error
		want int
	}{
		{nil, CodeSuccess},
		{core.ErrInvalidArgument, CodeParams},
		{&core.FieldError{Field: "writable_layer_size", Reason: "is required"}, CodeParams},
		{wrap(core.ErrTemplateIDRequired), CodeParams},
		{wrap(core.ErrDuplicateTemplate), CodeParams},
		{wrap(core.ErrNoTemplateNodes), CodeParams},
		{wrap(core.ErrTemplateNotReady), CodeParams},
		{wrap(core.ErrUnsupported), CodeParams},
		{wrap(core.ErrNotFound), CodeNotFound},
		{wrap(core.ErrUnauthenticated), CodeAuth},
		{&core.ActiveJobError{TemplateID: "t", JobID: "j", Status: core.JobRunning}, CodeConflict},
		{wrap(core.ErrConflict), CodeConflict},
		{wrap(core.ErrTemplateInUse), CodeConflict},
		{&core.TransitionError{JobID: "j", From: core.JobPending, To: core.JobReady}, CodeConflict},
		{wrap(core.ErrBusy), CodeBusy},
		{wrap(core.ErrLocked), CodeBusy},
		{wrap(core.ErrStoreNotInitialized), CodeDB},
		// Store-not-initialized wins over anything else it is joined with.
		{errors.Join(core.ErrNotFound, core.ErrStoreNotInitialized), CodeDB},
		{errors.New("dial tcp 10.0.0.3:3306: connection refused"), CodeInternal},
	}
	for _, tc := range tests {
		if got := CodeFor(tc.err); got != tc.want {
			t.Errorf("CodeFor(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestMessageHidesInternals(t *testing.T) {
	secret := errors.New("dial tcp 10.0.0.3:3306: access denied for user cube")
	tests := []struct {
		err     error
		want    string
		notWant string
	}{
		{secret, "internal error", "10.0.0.3"},
		{fmt.Errorf("list: %v: %w", secret, core.ErrStoreNotInitialized), "template store error", "10.0.0.3"},
		{fmt.Errorf("job j-1: %w", core.ErrNotFound), "job j-1: not found", ""},
		{&core.FieldError{Field: "writable_layer_size", Reason: "is required"}, "invalid writable_layer_size: is required", ""},
	}
	for _, tc := range tests {
		got := Message(tc.err)
		if got != tc.want {
			t.Errorf("Message(%v) = %q, want %q", tc.err, got, tc.want)
		}
		if tc.notWant != "" && strings.Contains(got, tc.notWant) {
			t.Errorf("Message leaks %q: %q", tc.notWant, got)
		}
	}
}

func TestWriteErrorShape(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
	WriteError(rec, req, nil, "req-1", fmt.Errorf("template t: %w", core.ErrNotFound))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d, business errors are HTTP 200", rec.Code)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	ret := got["ret"].(map[string]any)
	if got["requestID"] != "req-1" || ret["ret_code"].(float64) != CodeNotFound || ret["ret_msg"] != "template t: not found" {
		t.Fatalf("body %s", rec.Body.String())
	}
}

type sample struct {
	RequestID         string   `json:"requestID"`
	WritableLayerSize string   `json:"writable_layer_size"`
	Ports             []int32  `json:"exposed_ports"`
	Wait              bool     `json:"wait"`
	Data              []byte   `json:"envd_data"`
	Nested            *nested  `json:"container_overrides"`
	Extra             any      `json:"extra"`
	Tags              []string `json:"tags"`
}

type nested struct {
	Command []string `json:"command"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		limit     int64
		wantField string
		wantIn    string
		tooLarge  bool
	}{
		{name: "ok", body: `{"requestID":"r","writable_layer_size":"20Gi","exposed_ports":[80]}`},
		{name: "unknown fields ignored", body: `{"requestID":"r","no_such_field":{"a":1}}`},
		{name: "empty body", body: ``, wantField: "body", wantIn: "empty"},
		{name: "whitespace body", body: " \n", wantField: "body", wantIn: "empty"},
		{name: "type error names field", body: `{"writable_layer_size":20}`, wantField: "writable_layer_size", wantIn: "expected string, got number"},
		{name: "nested type error", body: `{"container_overrides":{"command":"ls"}}`, wantField: "container_overrides.command", wantIn: "expected array, got string"},
		{name: "int overflow", body: `{"exposed_ports":[99999999999]}`, wantField: "exposed_ports", wantIn: "expected integer"},
		{name: "bool as string", body: `{"wait":"yes"}`, wantField: "wait", wantIn: "expected boolean"},
		{name: "not an object", body: `[1,2]`, wantField: "body", wantIn: "expected object"},
		{name: "malformed", body: `{"requestID":}`, wantField: "body", wantIn: "malformed JSON"},
		{name: "truncated", body: `{"requestID":"r"`, wantField: "body", wantIn: "truncated"},
		{name: "trailing data", body: `{"requestID":"r"} {"x":1}`, wantField: "body", wantIn: "unexpected data"},
		{name: "trailing garbage", body: `{"requestID":"r"}xyz`, wantField: "body", wantIn: "unexpected data"},
		{name: "bad base64", body: `{"envd_data":"!!!"}`, wantField: "body", wantIn: "illegal base64"},
		{name: "too large", body: `{"requestID":"` + strings.Repeat("a", 200) + `"}`, limit: 64, wantField: "body", wantIn: "larger than 64 bytes", tooLarge: true},
		{name: "too large only in trailer", body: `{"requestID":"r"}` + strings.Repeat(" ", 100), limit: 40, wantField: "body", wantIn: "larger than 40", tooLarge: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tc.body))
			var dst sample
			err := Decode(httptest.NewRecorder(), req, tc.limit, &dst)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
			}
			if de.Field != tc.wantField || !strings.Contains(de.Reason, tc.wantIn) || de.TooLarge != tc.tooLarge {
				t.Fatalf("got field %q reason %q tooLarge %v; want field %q containing %q tooLarge %v",
					de.Field, de.Reason, de.TooLarge, tc.wantField, tc.wantIn, tc.tooLarge)
			}
			if !errors.Is(err, core.ErrInvalidArgument) || CodeFor(err) != CodeParams {
				t.Fatalf("decode errors must map to 130400, got %d", CodeFor(err))
			}
		})
	}
}

func TestDecodeKeepsNumbers(t *testing.T) {
	var dst sample
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{"extra":12345678901234567890}`))
	if err := Decode(httptest.NewRecorder(), req, 0, &dst); err != nil {
		t.Fatal(err)
	}
	if n, ok := dst.Extra.(json.Number); !ok || n.String() != "12345678901234567890" {
		t.Fatalf("extra = %#v, want exact json.Number", dst.Extra)
	}
}
