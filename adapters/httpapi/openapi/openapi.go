package openapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Param is a path, query or header parameter.
type Param struct {
	Name     string
	In       string // path, query, header
	Doc      string
	Required bool
}

// Response is one answer of an operation.
type Response struct {
	Doc string
	// Body is a Go value whose type is the JSON body (nil: no JSON body).
	Body any
	// ContentType, when set, is a non-JSON body (bytes, text).
	ContentType string
}

// Op is one operation.
type Op struct {
	Method, Path string
	Summary      string
	Description  string
	Tag          string
	Params       []Param
	// Body is a Go value whose type is the JSON request body.
	Body any
	// BodyType, when set, is a non-JSON request body's content type.
	BodyType string
	// Auth lists the ways a caller may authenticate, any one of which
	// will do; empty means the route takes no credentials. Every
	// operation's "security" says so explicitly.
	Auth      []Auth
	Responses map[int]Response
}

// Auth is one way to authenticate an operation.
type Auth string

// Ways to authenticate.
const (
	// AuthAnonymous: no credentials (with others, they are optional).
	AuthAnonymous Auth = "anonymous"
	// AuthCallbackToken: the shared token of the internal routes.
	AuthCallbackToken Auth = "callback_token"
	// AuthPublic: the master's public API credentials, a bearer token or
	// upstream's signed headers (when CUBE_MASTER_AUTH is on).
	AuthPublic Auth = "public"
	// AuthArtifactToken: an artifact's own download token.
	AuthArtifactToken Auth = "artifact_token"
)

// Header names of the credentials (packages auth and core spell them).
const (
	ArtifactTokenHeader = "X-Cube-Artifact-Token"
	signedUserID        = "cube_user_id"
	signedTimestamp     = "cube_timestamp"
	signedNonce         = "cube_nonce"
	signedMethod        = "cube_sgn_method"
	signedSignature     = "cube_signature"
)

// schemes are the security schemes an Auth needs, by name.
func (a Auth) schemes() map[string]any {
	header := func(name, doc string) map[string]any {
		return map[string]any{"type": "apiKey", "in": "header", "name": name, "description": doc}
	}
	switch a {
	case AuthCallbackToken:
		return map[string]any{"callbackToken": header(TokenHeader, "CUBE_TEMPLATE_CALLBACK_TOKEN, the same on both services")}
	case AuthArtifactToken:
		return map[string]any{"artifactToken": header(ArtifactTokenHeader, "the artifact's download token (core.Artifact.DownloadToken), handed to nodes with the artifact")}
	case AuthPublic:
		signed := "upstream's signed request: cube_signature over the method, path, cube_user_id, cube_timestamp and cube_nonce with the user's key (CUBE_MASTER_AUTH_SECRET_KEYS)"
		return map[string]any{
			"bearerAuth": map[string]any{"type": "http", "scheme": "bearer",
				"description": "one of CUBE_MASTER_AUTH_BEARER_TOKENS (cubemastercli sends CUBE_MASTER_TOKEN); required unless CUBE_MASTER_AUTH=false"},
			"cubeUserID": header(signedUserID, signed), "cubeTimestamp": header(signedTimestamp, signed),
			"cubeNonce": header(signedNonce, signed), "cubeSgnMethod": header(signedMethod, signed),
			"cubeSignature": header(signedSignature, signed),
		}
	}
	return nil
}

// requirements are the security requirement objects of an Auth: each is
// one way in (the names it lists are all needed).
func (a Auth) requirements() []any {
	none := []string{}
	switch a {
	case AuthCallbackToken:
		return []any{map[string]any{"callbackToken": none}}
	case AuthArtifactToken:
		return []any{map[string]any{"artifactToken": none}}
	case AuthPublic:
		return []any{map[string]any{"bearerAuth": none},
			map[string]any{"cubeUserID": none, "cubeTimestamp": none, "cubeNonce": none, "cubeSgnMethod": none, "cubeSignature": none}}
	}
	return []any{map[string]any{}} // anonymous
}

// Key is "METHOD path", as the routers' route tables spell it.
func (o Op) Key() string { return o.Method + " " + o.Path }

// TokenHeader is the header of the shared token (package auth).
const TokenHeader = "X-Cube-Template-Callback-Token"

// Document renders an OpenAPI 3.0 document.
func Document(title, version, description string, ops []Op) ([]byte, error) {
	g := &gen{schemas: map[string]any{}}
	schemes := map[string]any{}
	paths := map[string]map[string]any{}
	for _, o := range ops {
		op := map[string]any{"summary": o.Summary, "operationId": operationID(o)}
		if o.Description != "" {
			op["description"] = o.Description
		}
		if o.Tag != "" {
			op["tags"] = []string{o.Tag}
		}
		var params []any
		for _, p := range o.Params {
			params = append(params, map[string]any{"name": p.Name, "in": p.In, "description": p.Doc,
				"required": p.Required || p.In == "path", "schema": map[string]any{"type": "string"}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		switch {
		case o.Body != nil:
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(o.Body))}}}
		case o.BodyType != "":
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				o.BodyType: map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		}
		security := []any{}
		for _, a := range o.Auth {
			security = append(security, a.requirements()...)
			for name, sc := range a.schemes() {
				schemes[name] = sc
			}
		}
		op["security"] = security
		resps := map[string]any{}
		for code, r := range o.Responses {
			resp := map[string]any{"description": r.Doc}
			switch {
			case r.Body != nil:
				resp["content"] = map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(r.Body))}}
			case r.ContentType != "":
				resp["content"] = map[string]any{r.ContentType: map[string]any{"schema": map[string]any{"type": "string"}}}
			}
			resps[strconv.Itoa(code)] = resp
		}
		op["responses"] = resps
		if paths[o.Path] == nil {
			paths[o.Path] = map[string]any{}
		}
		paths[o.Path][strings.ToLower(o.Method)] = op
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": title, "version": version, "description": description},
		"paths":   paths,
		"components": map[string]any{
			"schemas":         g.schemas,
			"securitySchemes": schemes,
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

func operationID(o Op) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(o.Method))
	for _, part := range strings.FieldsFunc(o.Path, func(r rune) bool { return r == '/' || r == '{' || r == '}' || r == '-' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// Paths lists the "METHOD path" keys of a document (for tests).
func Paths(doc []byte) ([]string, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var out []string
	for p, ops := range d.Paths {
		for m := range ops {
			out = append(out, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Handler serves a document.
func Handler(doc []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
}

type gen struct{ schemas map[string]any }

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

// schema returns the schema of t, registering named structs as components.
func (g *gen) schema(t reflect.Type) map[string]any {
	switch {
	case t == rawType:
		return map[string]any{"description": "any JSON value"}
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{"description": "any JSON value"}
	case reflect.Struct:
		name := t.Name()
		if name == "" {
			return g.object(t)
		}
		if _, ok := g.schemas[name]; !ok {
			g.schemas[name] = map[string]any{} // breaks cycles
			g.schemas[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

// object is a struct's schema; embedded structs' fields are inlined, as
// encoding/json does.
func (g *gen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		sort.Strings(required)
		s["required"] = required
	}
	return s
}

func (g *gen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(ft)
		if !strings.Contains(opts, "omitempty") && ft.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
}
