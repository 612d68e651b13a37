package cubeview

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// Redacted replaces every secret Redact removes.
const Redacted = "REDACTED"

// secretKeys are the JSON object keys (compared without case) whose
// string values are credentials: the artifact download token and the
// registry credentials a node pulls with (annotations and the image's own
// token), egress-injected secrets, passwords.
var secretKeys = map[string]bool{
	core.AnnotationArtifactToken: true,
	core.AnnotationImageToken:    true,
	"token":                      true,
	"download_token":             true,
	"secret":                     true,
	"password":                   true,
	"registry_password":          true,
	"registry_auth":              true,
	"authorization":              true,
}

// secretQuery are URL query parameters that carry credentials (the
// download URL's token).
var secretQuery = []string{"token"}

// Redact returns raw (a JSON document) with every credential replaced by
// Redacted: the string value of a key in secretKeys, a URL's token query
// parameter and a URL's password, at any depth. Key order and every other
// value are kept. changed says whether anything was replaced; a document
// that is not valid JSON comes back unchanged, with changed false.
func Redact(raw []byte) (out []byte, changed bool) {
	if !bytes.Contains(raw, []byte(`"`)) {
		return raw, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	r := redactor{dec: dec}
	if err := r.value(false); err != nil {
		return raw, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return raw, false
	}
	if !r.changed {
		return raw, false
	}
	return r.buf.Bytes(), true
}

type redactor struct {
	dec     *json.Decoder
	buf     bytes.Buffer
	changed bool
}

// value copies one JSON value; secret says its key names a credential.
func (r *redactor) value(secret bool) error {
	tok, err := r.dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			r.buf.WriteByte('{')
			for first := true; r.dec.More(); first = false {
				k, err := r.dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if !first {
					r.buf.WriteByte(',')
				}
				r.str(key)
				r.buf.WriteByte(':')
				if err := r.value(secretKeys[strings.ToLower(key)]); err != nil {
					return err
				}
			}
			r.buf.WriteByte('}')
		case '[':
			r.buf.WriteByte('[')
			for first := true; r.dec.More(); first = false {
				if !first {
					r.buf.WriteByte(',')
				}
				if err := r.value(secret); err != nil {
					return err
				}
			}
			r.buf.WriteByte(']')
		}
		_, err := r.dec.Token() // the closing delimiter
		return err
	case string:
		switch {
		case secret && t != "":
			r.changed = true
			r.str(Redacted)
		default:
			if s, ok := RedactURL(t); ok {
				r.changed = true
				t = s
			}
			r.str(t)
		}
	case json.Number:
		r.buf.WriteString(t.String())
	case bool:
		if t {
			r.buf.WriteString("true")
		} else {
			r.buf.WriteString("false")
		}
	case nil:
		r.buf.WriteString("null")
	}
	return nil
}

func (r *redactor) str(s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	r.buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// RedactURL hides the credentials of a URL string: its token query
// parameter and its password. ok is false (and s unchanged) when s is not
// such a URL.
func RedactURL(s string) (string, bool) {
	if !strings.Contains(s, "://") || (!strings.Contains(s, "token=") && !strings.Contains(s, "@")) {
		return s, false
	}
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" {
		return s, false
	}
	changed := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Redacted)
		changed = true
	}
	q := u.Query()
	for _, k := range secretQuery {
		if q.Get(k) != "" {
			q.Set(k, Redacted)
			changed = true
		}
	}
	if !changed {
		return s, false
	}
	u.RawQuery = q.Encode()
	return u.String(), true
}

// RedactString is Redact for stored JSON kept as a string ("" and text
// that is not JSON come back unchanged).
func RedactString(s string) string {
	if s == "" {
		return s
	}
	out, changed := Redact([]byte(s))
	if !changed {
		return s
	}
	return string(out)
}
