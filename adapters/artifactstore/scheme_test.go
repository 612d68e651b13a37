package artifactstore

import (
	"bytes"
	"context"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// testKindParse is the Parse of the scheme testkind, which
// registerTestKind registers once however often the tests run.
var (
	testKindParse    func(*url.URL, url.Values) (Opener, error)
	registerTestKind = sync.OnceFunc(func() {
		Register(Scheme{Name: "testkind", Remote: true, Parse: func(u *url.URL, q url.Values) (Opener, error) { return testKindParse(u, q) }})
	})
)

func TestBuiltInSchemes(t *testing.T) {
	if got := slices.DeleteFunc(Schemes(), func(n string) bool { return n == "testkind" }); !slices.Equal(got, []string{BackendFile, BackendGCS, BackendMem, BackendS3}) {
		t.Fatalf("Schemes() = %q", got)
	}
	for name, remote := range map[string]bool{BackendFile: false, BackendMem: false, BackendS3: true, BackendGCS: true} {
		if sc, ok := Lookup(name); !ok || sc.Remote != remote {
			t.Errorf("Lookup(%q) = %+v, %v; want Remote %v", name, sc, ok, remote)
		}
	}
	if _, ok := Lookup("ftp"); ok {
		t.Error("Lookup(ftp) found a scheme")
	}
}

// TestRegisteredSchemeOpens: a backend outside the built-in ones needs
// only its Scheme registered for Open to open its URLs, Backend to name
// it, and Put to read it back when it is remote.
func TestRegisteredSchemeOpens(t *testing.T) {
	var parsed url.Values
	registerTestKind()
	testKindParse = func(u *url.URL, q url.Values) (Opener, error) {
		parsed = q
		return memURL{}, nil
	}
	s, err := Open(context.Background(), "testkind://x?prefix=p&color=blue")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend() != "testkind" || s.prefix != "p/" || parsed.Get("color") != "blue" || parsed.Has("prefix") {
		t.Fatalf("Backend %q, prefix %q, Parse saw %v", s.Backend(), s.prefix, parsed)
	}
	data := []byte("bytes")
	if err := s.Put(context.Background(), "k", bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Scheme{{Name: "testkind", Parse: fileScheme.Parse}, {Name: "", Parse: fileScheme.Parse}, {Name: "noparse"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad.Name)
				}
			}()
			Register(bad)
		}()
	}
}
