package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestMiddleware(t *testing.T) {
	const secret = "s3cret-token-value"
	tests := []struct {
		name     string
		secret   string
		insecure bool
		header   *string // nil: header absent
		want     int
	}{
		{"match", secret, false, ptr(secret), http.StatusOK},
		{"mismatch", secret, false, ptr("wrong"), http.StatusUnauthorized},
		{"prefix of secret", secret, false, ptr(secret[:5]), http.StatusUnauthorized},
		{"secret plus suffix", secret, false, ptr(secret + "x"), http.StatusUnauthorized},
		{"missing header", secret, false, nil, http.StatusUnauthorized},
		{"empty header", secret, false, ptr(""), http.StatusUnauthorized},
		{"insecure does not bypass a configured secret", secret, true, ptr("wrong"), http.StatusUnauthorized},
		{"insecure with secret and match", secret, true, ptr(secret), http.StatusOK},
		{"no secret fails closed", "", false, nil, http.StatusServiceUnavailable},
		{"no secret, empty header still fails closed", "", false, ptr(""), http.StatusServiceUnavailable},
		{"no secret, any header fails closed", "", false, ptr("anything"), http.StatusServiceUnavailable},
		{"whitespace secret is no secret", "  ", false, ptr("  "), http.StatusServiceUnavailable},
		{"no secret, insecure opt-in", "", true, nil, http.StatusOK},
		{"no secret, insecure opt-in, header ignored", "", true, ptr("x"), http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reached := false
			h := Middleware(tc.secret, tc.insecure)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				w.WriteHeader(http.StatusOK)
			}))
			req := httptest.NewRequest(http.MethodPost, "/tc/api/v1/build", nil)
			if tc.header != nil {
				req.Header.Set(Header, *tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tc.want, rec.Body.String())
			}
			if reached != (tc.want == http.StatusOK) {
				t.Fatalf("handler reached = %v with status %d", reached, rec.Code)
			}
			if tc.want != http.StatusOK && rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("rejection content type %q", rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"", "", false},
		{"a", "", false},
		{"", "a", false},
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"abc", "abcd", false},
	}
	for _, tc := range tests {
		if got := Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCheckConfig(t *testing.T) {
	tests := []struct {
		token    string
		insecure bool
		wantErr  bool
	}{
		{"tok", false, false},
		{"tok", true, false},
		{"", true, false},
		{"", false, true},
		{" \t", false, true},
	}
	for _, tc := range tests {
		err := CheckConfig(tc.token, tc.insecure)
		if (err != nil) != tc.wantErr {
			t.Errorf("CheckConfig(%q, %v) = %v, wantErr %v", tc.token, tc.insecure, err, tc.wantErr)
		}
		if err != nil && !errors.Is(err, ErrNoSecret) {
			t.Errorf("error %v does not wrap ErrNoSecret", err)
		}
	}
}

func ptr(s string) *string { return &s }
