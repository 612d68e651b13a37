package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/cubesandbox/templatecenter/core"
)

// DefaultMaxBodyBytes caps JSON request bodies unless a route says otherwise.
const DefaultMaxBodyBytes int64 = 1 << 20

// DecodeError is a body that could not be decoded. It wraps
// core.ErrInvalidArgument, so CodeFor gives 130400 and internal routes 400.
type DecodeError struct {
	// Field is the offending JSON field path ("request.writable_layer_size"),
	// or "body" for problems with the body as a whole.
	Field string
	// Reason says what is wrong.
	Reason string
	// TooLarge is set when the body exceeded the cap (internal routes
	// answer 413).
	TooLarge bool
}

func (e *DecodeError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, core.ErrInvalidArgument) true.
func (e *DecodeError) Unwrap() error { return core.ErrInvalidArgument }

// Decode reads one JSON value from r's body into dst, reading at most limit
// bytes (DefaultMaxBodyBytes when limit <= 0). Unknown fields are ignored,
// as upstream does; numbers decoded into interface values stay json.Number.
// An empty body, malformed JSON, trailing data, a type mismatch or an
// oversized body give a *DecodeError naming the field.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	defer body.Close()
	return DecodeReader(body, dst)
}

// DecodeReader is Decode for a reader the caller has already limited.
func DecodeReader(rd io.Reader, dst any) error {
	dec := json.NewDecoder(rd)
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, dec)
	}
	// A second value, or garbage, after the first is an error: the client
	// sent something other than what it thinks it sent.
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			if de := sizeError(err); de != nil {
				return de
			}
		}
		return &DecodeError{Field: "body", Reason: "unexpected data after the JSON value"}
	}
	return nil
}

func sizeError(err error) *DecodeError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &DecodeError{Field: "body", Reason: fmt.Sprintf("larger than %d bytes", mbe.Limit), TooLarge: true}
	}
	return nil
}

func decodeError(err error, dec *json.Decoder) error {
	if de := sizeError(err); de != nil {
		return de
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return &DecodeError{Field: "body", Reason: "is empty; a JSON object is required"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &DecodeError{Field: "body", Reason: "truncated JSON"}
	case errors.As(err, &syn):
		return &DecodeError{Field: "body", Reason: fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn)}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return &DecodeError{Field: field, Reason: fmt.Sprintf("expected %s, got %s", kindName(typ.Type), typ.Value)}
	}
	// Errors from UnmarshalJSON methods (base64, RawMessage) and the like.
	return &DecodeError{Field: "body", Reason: err.Error()}
}

// kindName says what JSON a Go type accepts, in JSON's vocabulary.
func kindName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64 string"
		}
		return "array"
	case reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}
