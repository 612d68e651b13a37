package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// secrets lists the strings that must never leave the adapter: the
// request's password in the forms it could appear in (plain, URL-escaped,
// inside a Basic Authorization value).
type secrets []string

// minSecret is the shortest password scrubbed: replacing every "a" in a
// message would hide more than it protects. Such passwords are still never
// written by this package; scrubbing is defence in depth.
const minSecret = 3

func newSecrets(user, pass string) secrets {
	if len(pass) < minSecret {
		return nil
	}
	s := secrets{pass, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}
	if q := url.QueryEscape(pass); q != pass {
		s = append(s, q)
	}
	if p := url.PathEscape(pass); p != pass {
		s = append(s, p)
	}
	return s
}

func (s secrets) scrub(msg string) string {
	for _, x := range s {
		msg = strings.ReplaceAll(msg, x, "***")
	}
	return msg
}

// scrubbedError carries a cleaned message and only the sentinels the
// original matched, so unwrapping cannot reach the secret either.
type scrubbedError struct {
	msg  string
	kind []error
}

func (e *scrubbedError) Error() string   { return e.msg }
func (e *scrubbedError) Unwrap() []error { return e.kind }

// clean returns err unchanged when it holds no secret, or a replacement
// with the secret masked that still matches the package and core
// sentinels err matched.
func (s secrets) clean(err error) error {
	if err == nil || len(s) == 0 {
		return err
	}
	msg := err.Error()
	cleaned := s.scrub(msg)
	if cleaned == msg {
		return err
	}
	var kinds []error
	for _, k := range sentinels {
		if errors.Is(err, k) {
			kinds = append(kinds, k)
		}
	}
	return &scrubbedError{msg: cleaned, kind: kinds}
}

// scrubHandler masks secrets in log records regclient writes and drops
// its chatter below minLevel.
type scrubHandler struct {
	inner    slog.Handler
	secrets  secrets
	minLevel slog.Level
}

func (h *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.minLevel && h.inner.Enabled(ctx, l)
}

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.scrubAttr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *scrubHandler) scrubAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.secrets.scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, 0, len(g))
		for _, x := range g {
			out = append(out, h.scrubAttr(x))
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		return slog.String(a.Key, h.secrets.scrub(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = h.scrubAttr(a)
	}
	return &scrubHandler{inner: h.inner.WithAttrs(clean), secrets: h.secrets, minLevel: h.minLevel}
}

func (h *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{inner: h.inner.WithGroup(name), secrets: h.secrets, minLevel: h.minLevel}
}
