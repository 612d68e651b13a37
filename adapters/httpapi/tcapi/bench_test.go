package tcapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// BenchmarkDownloadFileStore streams a 64 MiB artifact from a real file
// store through the download handler over loopback HTTP.
func BenchmarkDownloadFileStore(b *testing.B) {
	const size = 64 << 20
	data := bytes.Repeat([]byte{0xA5, 0x5A, 0x00, 0xFF}, size/4)
	st := fileStoreB(b)
	put(b, st, core.ArtifactObjectKey("rfs-bench"), data)
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-bench": {ArtifactID: "rfs-bench", Status: core.ArtifactReady, DownloadToken: dlToken, Ext4SHA256: sum(data)},
	}}
	srv := httptest.NewServer(New(Config{Artifacts: lookup, Store: st}))
	defer srv.Close()
	url := srv.URL + dlURL("rfs-bench", dlToken)
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size || resp.StatusCode != 200 {
			b.Fatalf("%d bytes, status %d, %v", n, resp.StatusCode, err)
		}
	}
}
