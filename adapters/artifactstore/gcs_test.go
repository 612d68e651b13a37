package artifactstore

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/artifactstoretest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// The service account the tests sign as, and its key: a key made for these
// tests only (testdata/gcs-test-key.pem), known to no Google project.
const (
	gcsTestAccessID = "cube-artifacts@cube-test.iam.gserviceaccount.com"
	gcsTestKeyFile  = "testdata/gcs-test-key.pem"
)

// emulatorEnv is the variable cloud.google.com/go/storage reads to talk to
// an emulator instead of Google.
const emulatorEnv = "STORAGE_EMULATOR_HOST"

func gcsKeyPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(gcsTestKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gcsStoreURL is the gs:// URL the tests open: the test key signs URLs.
func gcsStoreURL(t *testing.T, bucket, prefix string) string {
	q := url.Values{"prefix": {prefix}, "access_id": {gcsTestAccessID}, "private_key_path": {gcsKeyPath(t)}}
	return "gs://" + bucket + "?" + q.Encode()
}

// gcsHarness opens gs:// stores the way the app does (Open with a URL),
// pointed at fake-gcs-server through STORAGE_EMULATOR_HOST, under a prefix
// unique to the harness, and deletes everything below it on Close.
type gcsHarness struct {
	t        *testing.T
	url      string
	endpoint *url.URL
	stores   []*Store
}

func newGCSHarness(_ context.Context, t *testing.T) (artifactstoretest.Harness, error) {
	endpoint, err := url.Parse(testenv.Get(t, testenv.GCSEndpoint))
	if err != nil {
		return nil, err
	}
	bucket := testenv.Get(t, testenv.GCSBucket)
	// Set before the first gs:// open: gcsblob then uses no Google
	// credentials at all (never the metadata server).
	t.Setenv(emulatorEnv, endpoint.Host) // host:port; the client adds http://
	return &gcsHarness{t: t, endpoint: endpoint, url: gcsStoreURL(t, bucket, "artifactstore-test-"+randomHex())}, nil
}

func (h *gcsHarness) MakeStore(ctx context.Context) (ports.ArtifactStore, error) {
	s, err := Open(ctx, h.url)
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *gcsHarness) SupportsSignedURL() bool { return true }

func (h *gcsHarness) Backend() string { return BackendGCS }

// SignedURLClient: signed URLs name https on the emulator's host, as they
// would name https on Google's; the emulator speaks plain HTTP.
func (h *gcsHarness) SignedURLClient() *http.Client {
	return &http.Client{Transport: emulatorTransport{host: h.endpoint.Host, scheme: h.endpoint.Scheme}}
}

func (h *gcsHarness) Close() {
	for _, s := range h.stores {
		cleanPrefix(h.t, s)
		_ = s.Close()
	}
}

// emulatorTransport sends requests for the emulator's host with the
// emulator's scheme.
type emulatorTransport struct{ host, scheme string }

func (e emulatorTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == e.host {
		r = r.Clone(r.Context())
		r.URL.Scheme = e.scheme
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestConformanceGCS runs the artifact-store suite against fake-gcs-server:
// uploads (chunked for the large object), ranged reads, deletes, the
// listing the harness cleans up with, and signed URLs fetched over HTTP.
// The emulator does not check signatures; TestGCSSignedURLGolden does.
func TestConformanceGCS(t *testing.T) {
	artifactstoretest.RunConformanceTests(t, newGCSHarness)
}

func openTestGCS(t *testing.T) (*Store, *gcsHarness) {
	t.Helper()
	h, err := newGCSHarness(context.Background(), t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	s, err := h.MakeStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.(*Store), h.(*gcsHarness)
}

// TestGCSListing lists what Put wrote below the store's prefix and finds
// exactly the published objects (none of a failed Put), with the sha256
// metadata that Stat reads.
func TestGCSListing(t *testing.T) {
	s, _ := openTestGCS(t)
	ctx := context.Background()
	want := map[string][]byte{}
	for i, key := range []string{"a/one.ext4", "a/two.ext4", "b/three.ext4"} {
		data := bytes.Repeat([]byte{byte(i + 1)}, 1000*(i+1))
		if err := s.Put(ctx, key, bytes.NewReader(data), info(data)); err != nil {
			t.Fatal(err)
		}
		want[key] = data
	}
	bad := []byte("short")
	if err := s.Put(ctx, "a/failed.ext4", bytes.NewReader(bad), info(append(bad, '!'))); err == nil {
		t.Fatal("Put with a wrong size succeeded")
	}
	bb := s.be.(*bucketBackend)
	it := bb.b.List(&blob.ListOptions{Prefix: s.prefix})
	got := map[string]int64{}
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(obj.Key, s.prefix)] = obj.Size
	}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want the keys of %d objects", got, len(want))
	}
	for key, data := range want {
		if got[key] != int64(len(data)) {
			t.Errorf("listed %s with %d bytes, want %d", key, got[key], len(data))
		}
		st, err := s.Stat(ctx, key)
		if err != nil || st.SHA256 != info(data).SHA256 {
			t.Errorf("Stat(%s) = %+v, %v; want sha256 %s from the object metadata", key, st, err, info(data).SHA256)
		}
	}
	// Delete removes objects from the listing too.
	if err := s.Delete(ctx, "a/one.ext4"); err != nil {
		t.Fatal(err)
	}
	it = bb.b.List(&blob.ListOptions{Prefix: s.prefix + "a/"})
	n := 0
	for {
		if _, err := it.Next(ctx); err != nil {
			break
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d objects below a/ after deleting one of two", n)
	}
}

// TestGCSDownloadRedirect follows a 302 to the signed URL with a Range
// header, the way a node downloads an artifact the data plane redirects it
// to.
func TestGCSDownloadRedirect(t *testing.T) {
	s, h := openTestGCS(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("cube"), 5000)
	key := "sha256/" + info(data).SHA256 + ".ext4"
	if err := s.Put(ctx, key, bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := s.SignedURL(r.Context(), key, time.Minute)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, u, http.StatusFound)
	}))
	defer redirect.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, redirect.URL+"/download", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", "bytes=4-11")
	resp, err := h.SignedURLClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || string(body) != "cubecube" {
		t.Fatalf("after the redirect: status %d, body %q; want 206 and \"cubecube\"", resp.StatusCode, body)
	}
}

// TestGCSSignedURLGolden checks the signed URL of a gs:// store against one
// built independently from Google's V2 signing rules with the test key:
// scheme, host, path escaping, parameters and the RSA-SHA256 signature,
// byte for byte. Only the expiry depends on the clock, so the expected URL
// is built for the expiry the store chose, after checking it lies ttl after
// the call. No request is sent: signing is local.
func TestGCSSignedURLGolden(t *testing.T) {
	// Point the storage client at an address nothing serves rather than at
	// Google, and keep gcsblob from looking for credentials.
	t.Setenv(emulatorEnv, "")
	keyPEM, err := os.ReadFile(gcsKeyPath(t))
	if err != nil {
		t.Fatal(err)
	}
	key := parseTestKey(t, keyPEM)
	raw := gcsStoreURL(t, "cube-golden", "tenant/a")
	su, err := parseStoreURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(string(su.opener.(gsURL)))
	if err != nil {
		t.Fatal(err)
	}
	// The URL opener gs:// uses, with an anonymous client: Open would look
	// up Application Default Credentials first, which signing never needs.
	opener := &gcsblob.URLOpener{Client: gcp.NewAnonymousHTTPClient(gcp.DefaultTransport())}
	b, err := opener.OpenBucketURL(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{kind: BackendGCS, prefix: su.prefix, be: &bucketBackend{b: b, partSize: DefaultPartSize, canSign: true}}
	defer s.Close()

	for _, tc := range []struct {
		key, escapedPath string
	}{
		{"sha256/0123abcd.ext4", "/cube-golden/tenant/a/sha256/0123abcd.ext4"},
		{"with space+plus/é.ext4", "/cube-golden/tenant/a/with%20space+plus/%C3%A9.ext4"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			const ttl = 15 * time.Minute
			before := time.Now()
			got, err := s.SignedURL(context.Background(), tc.key, ttl)
			after := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			gu, err := url.Parse(got)
			if err != nil {
				t.Fatal(err)
			}
			expires, err := strconv.ParseInt(gu.Query().Get("Expires"), 10, 64)
			if err != nil {
				t.Fatalf("Expires in %s: %v", got, err)
			}
			if lo, hi := before.Add(ttl).Unix(), after.Add(ttl).Unix(); expires < lo || expires > hi {
				t.Fatalf("Expires %d, want between %d and %d (ttl after the call)", expires, lo, hi)
			}
			// V2: sign "GET\n<md5>\n<content type>\n<expires>\n<resource>".
			toSign := fmt.Sprintf("GET\n\n\n%d\n%s", expires, tc.escapedPath)
			sum := sha256.Sum256([]byte(toSign))
			sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
			if err != nil {
				t.Fatal(err)
			}
			want := "https://storage.googleapis.com" + tc.escapedPath + "?" + url.Values{
				"Expires":        {strconv.FormatInt(expires, 10)},
				"GoogleAccessId": {gcsTestAccessID},
				"Signature":      {base64.StdEncoding.EncodeToString(sig)},
			}.Encode()
			if got != want {
				t.Fatalf("signed URL\n got %s\nwant %s", got, want)
			}
		})
	}
}

func parseTestKey(t *testing.T, b []byte) *rsa.PrivateKey {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("test key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey)
}
