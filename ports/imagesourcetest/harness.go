package imagesourcetest

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives the suite an ImageSource and a registry it reads.
type Harness interface {
	// MakeSource returns the ImageSource under test. Sources of one harness
	// may share a layer cache, as builds on one machine do.
	MakeSource(ctx context.Context) (ports.ImageSource, error)
	// Repository returns a new, empty repository the sources can read, as
	// "registry-host[:port]/path"; the suite appends ":tag" or "@digest".
	// name is a hint for the path.
	Repository(ctx context.Context, name string) (string, error)
	// PushBlob stores data as a blob of repo.
	PushBlob(ctx context.Context, repo string, data []byte) error
	// PushManifest stores a manifest or index of the given media type in
	// repo under reference: a tag, or the digest of data.
	PushManifest(ctx context.Context, repo, reference, mediaType string, data []byte) error
	// Close releases what the harness opened.
	Close()
}

// ContentCorrupter is an optional Harness capability: the registry serves
// wrong bytes (same length, same headers) for content fetched by digest.
type ContentCorrupter interface {
	// Corrupt makes GETs of the blob or manifest with this digest return
	// corrupted bytes until restore is called.
	Corrupt(digest string) (restore func())
}

// Staller is an optional Harness capability: the registry holds a response.
type Staller interface {
	// Stall holds GETs of the blob or manifest with this digest until
	// release is called or the request is cancelled; arrived is closed when
	// the first such request reaches the registry.
	Stall(digest string) (arrived <-chan struct{}, release func())
}

// CredentialChecker is an optional Harness capability: the registry
// demands credentials.
type CredentialChecker interface {
	// RequireCredentials makes the registry refuse every request that does
	// not carry username and password (HTTP basic auth).
	RequireCredentials(username, password string)
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)
