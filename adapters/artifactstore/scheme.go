package artifactstore

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sync"
)

// A Scheme is one kind of artifact store, named by the scheme of the URLs
// that open it (gocloud's URLMux shape). Each backend declares its own
// beside its code; Register makes it known to Open, and everything that
// names store kinds (Store.Backend, the data plane's settings, its scrub
// rule) reads them from here. Adding a backend is its own package or file
// plus one Register line.
type Scheme struct {
	// Name is the URL scheme and what Store.Backend reports.
	Name string
	// Remote means the bytes live on another machine: Put reads them back
	// before it returns, and the data plane's scrubber reads them only
	// when told to (ScrubRemote), since every read costs egress.
	Remote bool
	// Parse reads a URL of this scheme into what opens it. q is the URL's
	// query with the prefix parameter (which every scheme takes, see
	// Open) removed; Parse refuses the parameters it does not know,
	// naming them, and never quotes a parameter's value in an error.
	Parse func(u *url.URL, q url.Values) (Opener, error)
}

// An Opener opens the store one parsed URL names.
type Opener interface {
	Open(ctx context.Context) (Driver, error)
}

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Scheme{}
)

// The built-in kinds, one line each.
func init() {
	Register(fileScheme)
	Register(s3Scheme)
	Register(gsScheme)
	Register(memScheme)
}

// Register makes a kind of store openable by Open. It panics when the
// scheme is empty, has no Parse, or is registered already, as
// database/sql.Register does: registration happens at start-up, and a
// clash is a programming error.
func Register(s Scheme) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	switch _, dup := schemes[s.Name]; {
	case s.Name == "" || s.Parse == nil:
		panic("artifactstore: Register needs a scheme name and a Parse")
	case dup:
		panic(fmt.Sprintf("artifactstore: scheme %q registered twice", s.Name))
	}
	schemes[s.Name] = s
}

// Lookup returns the registered kind of store with this name.
func Lookup(name string) (Scheme, bool) {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	s, ok := schemes[name]
	return s, ok
}

// Schemes lists the registered kinds' names, sorted.
func Schemes() []string {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	return slices.Sorted(maps.Keys(schemes))
}
