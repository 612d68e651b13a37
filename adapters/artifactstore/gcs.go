package artifactstore

import (
	"context"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/gcsblob" // registers gs:// on blob.DefaultURLMux

	"github.com/cubesandbox/templatecenter/core"
)

// gsScheme is gs://bucket[?gcsblob parameters]: Google Cloud Storage,
// with Application Default Credentials.
var gsScheme = Scheme{Name: BackendGCS, Remote: true, Parse: parseGSURL}

// gsURL is the bucket URL handed to gcsblob, the prefix removed.
type gsURL string

func (g gsURL) Open(ctx context.Context) (Driver, error) {
	b, err := blob.OpenBucket(ctx, string(g))
	if err != nil {
		return nil, fmt.Errorf("open gcs bucket: %w", err)
	}
	return &bucketBackend{b: b, partSize: DefaultPartSize, canSign: true}, nil
}

func parseGSURL(u *url.URL, q url.Values) (Opener, error) {
	if err := noBucketPath(u); err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, &core.FieldError{Field: "url", Reason: "gs:// needs a bucket name as host"}
	}
	return gsURL((&url.URL{Scheme: BackendGCS, Host: u.Host, RawQuery: q.Encode()}).String()), nil
}
