package artifactstore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// A declared size checkWant accepts, however large, is a mismatch for a
// shorter reader, not a panic: the verifier's one byte of look-ahead past
// the size must not overflow.
func TestPutHugeDeclaredSizeIsAMismatch(t *testing.T) {
	data := []byte("a short body")
	for _, url := range []string{"file://" + t.TempDir(), "mem://"} {
		t.Run(url[:4], func(t *testing.T) {
			s, err := Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, size := range []int64{math.MaxInt64, math.MaxInt64 - 1} {
				want := ports.ObjectInfo{Size: size, SHA256: info(data).SHA256}
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("Put with size %d panicked: %v", size, p)
						}
					}()
					return s.Put(context.Background(), "a/a.ext4", bytes.NewReader(data), want)
				}()
				if !errors.Is(err, ErrContentMismatch) {
					t.Fatalf("Put with size %d = %v, want ErrContentMismatch", size, err)
				}
			}
		})
	}
}
