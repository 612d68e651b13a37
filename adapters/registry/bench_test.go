package registry

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// benchImage pushes one image with a 64 MiB gzip layer and a 16 MiB zstd
// layer to host.
func benchImage(b *testing.B, host string) (string, int64) {
	layers := []testLayer{makeLayer(b, 64<<20, compGzip, false), makeLayer(b, 16<<20, compZstd, false)}
	refStr := host + "/" + uniqueRepo("cubetest/bench") + ":v1"
	pushImage(b, pusher(host), refStr, testImage{layers: layers})
	var total int64
	for _, l := range layers {
		total += int64(len(l.blob))
	}
	return refStr, total
}

// BenchmarkFetchCold measures download + verification + DiffID per byte
// into an empty cache from the in-process registry (which copies each blob
// into memory per GET, so its own cost is in the number).
func BenchmarkFetchCold(b *testing.B) {
	benchFetchCold(b, newFakeRegistry(b).host)
}

// BenchmarkFetchColdRealRegistry is the same against docker-registry 2.8
// on loopback.
func BenchmarkFetchColdRealRegistry(b *testing.B) {
	benchFetchCold(b, testenv.Get(b, testenv.Registry))
}

func benchFetchCold(b *testing.B, host string) {
	refStr, total := benchImage(b, host)
	b.SetBytes(total)
	for b.Loop() {
		b.StopTimer()
		cache, err := layercache.Open(b.TempDir(), 0)
		if err != nil {
			b.Fatal(err)
		}
		s := newTestSource(b, cache, nil, host)
		b.StartTimer()
		if _, _, err := fetch(b, s, ports.ImageRequest{Ref: refStr}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchWarm measures a fetch whose layers are all cached.
func BenchmarkFetchWarm(b *testing.B) {
	reg := newFakeRegistry(b)
	refStr, _ := benchImage(b, reg.host)
	cache, err := layercache.Open(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	s := newTestSource(b, cache, nil, reg.host)
	req := ports.ImageRequest{Ref: refStr}
	img, err := s.Resolve(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.FetchLayers(context.Background(), req, img, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.FetchLayers(context.Background(), req, img, nil); err != nil {
			b.Fatal(err)
		}
	}
}
