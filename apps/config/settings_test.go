package config

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md")

const referencePath = "../../docs/configuration.md"

// TestConfigurationReference keeps docs/configuration.md equal to what the
// settings table generates.
func TestConfigurationReference(t *testing.T) {
	var b bytes.Buffer
	if err := Reference(&b); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referencePath, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatal("docs/configuration.md is out of date: run go test ./apps/config -run TestConfigurationReference -update")
	}
}

// leafFields returns a pointer to every settable leaf field of c, with its
// dotted YAML key ("" when the field has yaml:"-").
func leafFields(v reflect.Value, prefix string, out map[any]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // bookkeeping of Load, not a setting
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		key := tag
		if tag == "-" {
			key = ""
		} else if prefix != "" {
			key = prefix + "." + tag
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type.String() != "time.Duration" {
			leafFields(fv, key, out)
			continue
		}
		out[fv.Addr().Interface()] = key
	}
}

// TestEverySettingIsDocumented fails when a Config field has no setting
// (so no variable and no line in the reference), when a setting's YAML key
// is not the field's, or when a setting says nothing.
func TestEverySettingIsDocumented(t *testing.T) {
	var c Config
	fields := map[any]string{}
	leafFields(reflect.ValueOf(&c).Elem(), "", fields)
	// Outputs of Load, not inputs.
	delete(fields, any(&c.Warnings))
	delete(fields, any(&c.Sources))
	delete(fields, any(&c.S3.Off)) // from CUBE_ARTIFACT_STORE_BACKEND
	seen := map[string]bool{}
	for _, s := range Settings() {
		if seen[s.Env] {
			t.Errorf("%s is listed twice", s.Env)
		}
		seen[s.Env] = true
		if strings.TrimSpace(s.Doc) == "" || s.Service == "" {
			t.Errorf("%s has no meaning or service", s.Env)
		}
		p := s.Field(&c)
		key, ok := fields[p]
		if !ok {
			t.Errorf("%s points at no (or an already documented) Config field", s.Env)
			continue
		}
		if key != s.YAML && (s.Env != PathVariable || key != "") {
			t.Errorf("%s: YAML key %q, but the field's key is %q", s.Env, s.YAML, key)
		}
		if s.Secret && key != "" {
			t.Errorf("%s is secret but has a YAML key", s.Env)
		}
		delete(fields, p)
	}
	for _, key := range fields {
		t.Errorf("a Config field (YAML key %q) has no setting: add it to Settings", key)
	}
}

var variableName = regexp.MustCompile(`CUBE_[A-Z0-9_]*[A-Z0-9]`)

// TestEveryVariableInTheSourceIsDocumented finds every CUBE_* name in the
// string literals of the non-test code and fails for one the reference
// does not list: a variable read somewhere without a line in Settings.
func TestEveryVariableInTheSourceIsDocumented(t *testing.T) {
	var b bytes.Buffer
	if err := Reference(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	prefixes := []string{"CUBE_TEMPLATE_CENTER", "CUBE_MASTER", "CUBE_S3"} // CUBE_S3_* in prose
	found := 0
	for _, root := range []string{"../../apps", "../../adapters", "../../core", "../../ports", "../../plugins"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				for _, name := range variableName.FindAllString(lit.Value, -1) {
					if strings.HasPrefix(name, "CUBE_TEST_") || slices.Contains(prefixes, name) {
						continue
					}
					found++
					if !strings.Contains(doc, "`"+name+"`") {
						t.Errorf("%s: %s is read but not in the configuration reference", p, name)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 40 {
		t.Fatalf("found only %d variable names: is the scan still looking at the code?", found)
	}
}

func TestUnknownVariablesNameTheNearest(t *testing.T) {
	cases := []struct {
		env  string
		want string // "" = no warning
	}{
		{"CUBE_TEMPLATE_CENTER_LISTN=x", "CUBE_TEMPLATE_CENTER_LISTEN"},
		{"CUBE_MASTER_NODE=a=b", "CUBE_MASTER_NODES"},
		{"CUBE_TEMPLATE_CENTER_REDIS_ADR=x", "CUBE_TEMPLATE_CENTER_REDIS_ADDR"},
		{"CUBE_MASTER_LISTEN=x", ""},
		{"CUBE_TC_CALLBACK_TOKEN=x", ""}, // a legacy name, not under a checked prefix
		{"CUBE_MASTER_ENDPOINT=x", ""},   // legacy names are known
		{"HOME=/root", ""},
	}
	for _, tc := range cases {
		got := UnknownVariables([]string{tc.env})
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: unexpected warning %q", tc.env, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], "did you mean "+tc.want+"?")):
			t.Errorf("%s: warnings %q, want one naming %s", tc.env, got, tc.want)
		}
	}
}

func TestPrintRedactsSecretsAndNamesSources(t *testing.T) {
	env := map[string]string{
		"CUBE_TEMPLATE_CALLBACK_TOKEN": "topsecret", "CUBE_S3_SECRET_KEY": "s3secret",
		"CUBE_TEMPLATE_CENTER_DB_DSN":   "mysql://cube:dbpass@tcp(127.0.0.1:3306)/cube",
		"CUBE_TC_MAX_CONCURRENT_BUILDS": "3",
	}
	c, err := Load(mapEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, &c, DataPlane); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, secret := range []string{"topsecret", "s3secret", "dbpass"} {
		if strings.Contains(out, secret) {
			t.Errorf("printed configuration shows %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"<redacted>", "mysql://cube:<redacted>@tcp(127.0.0.1:3306)/cube",
		"env (legacy CUBE_TC_MAX_CONCURRENT_BUILDS)", "CUBE_TEMPLATE_CENTER_LISTEN", "default"} {
		if !strings.Contains(out, want) {
			t.Errorf("printed configuration lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "CUBE_MASTER_NODES") {
		t.Errorf("the data plane's configuration lists a master setting:\n%s", out)
	}
}

func TestRedactDSN(t *testing.T) {
	cases := map[string]string{
		"postgres://u:pw@h:5432/db":     "postgres://u:<redacted>@h:5432/db",
		"postgres://u@h/db":             "postgres://u@h/db",
		"mysql://u:pw@tcp(h:3306)/db":   "mysql://u:<redacted>@tcp(h:3306)/db",
		"mariadb://u:pw@tcp(h:3306)/db": "mariadb://u:<redacted>@tcp(h:3306)/db",
		"sqlite:///var/lib/x/tc.db":     "sqlite:///var/lib/x/tc.db",
		"mysql://u@tcp(h:3306)/db?x=1":  "mysql://u@tcp(h:3306)/db?x=1",
		// go-sql-driver's own form, without a scheme.
		"root:hunter2@tcp(db:3306)/cube?parseTime=true": "root:<redacted>@tcp(db:3306)/cube?parseTime=true",
		"u:p@ss/w@unix(/run/mysqld.sock)/db":            "u:<redacted>@unix(/run/mysqld.sock)/db",
		"u:pw@/db":                                      "u:<redacted>@/db",
		"u@tcp(h:3306)/db":                              "u@tcp(h:3306)/db",
		"file:/var/lib/x/tc.db?_pragma=foreign_keys(1)": "file:/var/lib/x/tc.db?_pragma=foreign_keys(1)",
	}
	for in, want := range cases {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultsArePerUserAndLoopback(t *testing.T) {
	d := DefaultsFor(Dirs{State: "/s"})
	if d.DBDSN != "sqlite:///s/tc.db" || d.ArtifactStoreDir != "/s/artifacts" || d.WorkDir != "/s/work" {
		t.Errorf("paths not under the user's dirs: %+v", d)
	}
	for _, addr := range []string{d.Listen, d.Master.Listen} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("listen address %q is not loopback", addr)
		}
	}
}

func TestFileSourcesAreRecorded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("builder: ext4stream\nmaster:\n  log:\n    level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(mapEnv(map[string]string{PathVariable: p}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sources["CUBE_TEMPLATE_CENTER_BUILDER"] != "file" || c.Sources["CUBE_MASTER_LOG_LEVEL"] != "file" || c.Master.Log.Level != "debug" {
		t.Fatalf("sources %v, master log %+v", c.Sources, c.Master.Log)
	}
}

// upstreamKeys lists the dotted yaml keys of the leaves of t.
func upstreamKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		key := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if prefix != "" {
			key = prefix + "." + key
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			upstreamKeys(ft, key, out)
			continue
		}
		*out = append(*out, key)
	}
}

// TestEveryUpstreamKeyHasASetting: every key of upstream's conf.yaml that
// Load reads is named in a setting's Upstream column (a section name
// covers its keys), and every key named there is one Load reads.
func TestEveryUpstreamKeyHasASetting(t *testing.T) {
	var read []string
	upstreamKeys(reflect.TypeOf(upstreamFile{}), "", &read)
	var named []string
	for _, s := range Settings() {
		named = append(named, s.Upstream...)
	}
	for _, k := range read {
		if !slices.ContainsFunc(named, func(n string) bool { return k == n || strings.HasPrefix(k, n+".") }) {
			t.Errorf("upstream key %s is read but no setting names it", k)
		}
	}
	for _, n := range named {
		if !slices.ContainsFunc(read, func(k string) bool { return k == n || strings.HasPrefix(k, n+".") }) {
			t.Errorf("a setting names upstream key %s, which Load does not read", n)
		}
	}
}

// TestIgnoredVariablesAreKnown: an ignored upstream variable is logged
// with its reason and never reported as unknown.
func TestIgnoredVariablesAreKnown(t *testing.T) {
	for _, v := range IgnoredVariables() {
		if !Known(v.Env) || len(UnknownVariables([]string{v.Env + "=1"})) != 0 {
			t.Errorf("%s is reported as unknown", v.Env)
		}
		c, err := Load(mapEnv(map[string]string{v.Env: "true"}))
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, v.Env+" is ignored because "+v.Reason) {
			t.Errorf("%s: warnings %q", v.Env, c.Warnings)
		}
	}
}
