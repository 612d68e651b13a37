package chunk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// random returns n pseudo-random bytes for seed.
func random(seed uint64, n int) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

func build(t *testing.T, data []byte) *Index {
	t.Helper()
	x, err := Build(context.Background(), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// reassemble rebuilds the object from data's chunks, checking each sum.
func reassemble(t *testing.T, x *Index, data []byte) []byte {
	t.Helper()
	var out []byte
	for i, e := range x.Chunks {
		b := data[e.Offset:e.End()]
		if e.Zero {
			if !bytes.Equal(b, make([]byte, len(b))) {
				t.Fatalf("zero chunk %d holds data", i)
			}
		} else if sha256.Sum256(b) != e.Sum {
			t.Fatalf("chunk %d: sum does not match", i)
		}
		out = append(out, b...)
	}
	return out
}

func TestSplitCoversTheObject(t *testing.T) {
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name      string
		data      []byte
		wantZero  bool // some chunk is a zero chunk
		wantChunk int  // exact chunk count, when > 0
	}{
		{"empty", nil, false, 0},
		{"one byte", []byte{1}, false, 1},
		{"short tail", random(1, 3*BlockSize+17), false, 1},
		{"random 3 MiB", random(2, 3<<20), false, 0},
		{"all zero", zeros(10 * BlockSize), true, 1},
		{"zero tail not a block", zeros(5*BlockSize + 100), true, 1},
		{"short zero run stays in data", cat(random(3, 2*BlockSize), zeros(3*BlockSize), random(4, 2*BlockSize)), false, 1},
		{"long zero run stands alone", cat(random(5, 8*BlockSize), zeros(8*BlockSize), random(6, 8*BlockSize)), true, 0},
		{"a megabyte of one byte", bytes.Repeat([]byte{0xab}, 1<<20), false, (1 << 20) / MaxDataLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := build(t, tc.data)
			if err := x.Check(); err != nil {
				t.Fatal(err)
			}
			if x.Size != int64(len(tc.data)) || x.SHA256 != sha256.Sum256(tc.data) {
				t.Fatalf("size %d sha %x, want %d and the data's", x.Size, x.SHA256, len(tc.data))
			}
			if got := reassemble(t, x, tc.data); !bytes.Equal(got, tc.data) {
				t.Fatal("the chunks do not rebuild the object")
			}
			zero := false
			for i, e := range x.Chunks {
				zero = zero || e.Zero
				if !e.Zero && i < len(x.Chunks)-1 && e.Length < MinBlocks*BlockSize && !x.Chunks[i+1].Zero {
					t.Errorf("chunk %d: %d bytes, below the minimum though not last nor before zeros", i, e.Length)
				}
			}
			if zero != tc.wantZero {
				t.Errorf("zero chunks: %v, want %v", zero, tc.wantZero)
			}
			if tc.wantChunk > 0 && len(x.Chunks) != tc.wantChunk {
				t.Errorf("%d chunks, want %d", len(x.Chunks), tc.wantChunk)
			}
			again := build(t, tc.data)
			b1, _ := x.Marshal()
			b2, _ := again.Marshal()
			if !bytes.Equal(b1, b2) {
				t.Error("two splits of the same bytes differ")
			}
		})
	}
}

type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

func TestZeroChunksHaveAMaximum(t *testing.T) {
	var got []Entry
	size, err := Split(context.Background(), &zeroReader{MaxZeroLength + 8*BlockSize}, func(c Chunk) error {
		got = append(got, c.Entry)
		return nil
	})
	if err != nil || size != MaxZeroLength+8*BlockSize {
		t.Fatal(size, err)
	}
	if len(got) != 2 || !got[0].Zero || !got[1].Zero || got[0].Length != MaxZeroLength || got[1].Offset != MaxZeroLength {
		t.Fatalf("chunks %+v, want a full zero chunk and the rest", got)
	}
}

func TestSplitAverageSize(t *testing.T) {
	x := build(t, random(9, 64<<20))
	avg := x.Size / int64(len(x.Chunks))
	if avg < (MinBlocks+AvgBlocks/2)*BlockSize || avg > (MinBlocks+2*AvgBlocks)*BlockSize {
		t.Errorf("average chunk %d bytes over %d chunks, want about %d", avg, len(x.Chunks), (MinBlocks+AvgBlocks)*BlockSize)
	}
}

// TestBoundariesSurviveMovedContent: blocks inserted or removed ahead of
// content move it without changing most of its chunks, which is what lets
// a node reuse what it holds.
func TestBoundariesSurviveMovedContent(t *testing.T) {
	base := random(10, 16<<20)
	ids := func(x *Index) map[[32]byte]bool {
		m := map[[32]byte]bool{}
		for _, e := range x.Chunks {
			m[e.Sum] = true
		}
		return m
	}
	old := ids(build(t, base))
	tests := []struct {
		name string
		data []byte
	}{
		{"blocks inserted", bytes.Join([][]byte{base[:5<<20], random(11, 7*BlockSize), base[5<<20:]}, nil)},
		{"blocks removed", bytes.Join([][]byte{base[:5<<20], base[5<<20+9*BlockSize:]}, nil)},
		{"a block rewritten", bytes.Join([][]byte{base[:5<<20], random(12, BlockSize), base[5<<20+BlockSize:]}, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := build(t, tc.data)
			var fresh int64
			for _, e := range x.Chunks {
				if !old[e.Sum] {
					fresh += int64(e.Length)
				}
			}
			if fresh > 4*MaxDataLength {
				t.Errorf("%d bytes in chunks the old object lacks, want at most %d", fresh, 4*MaxDataLength)
			}
		})
	}
}

func TestSplitStopsOnEmitError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Split(context.Background(), bytes.NewReader(random(13, 1<<20)), func(Chunk) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Split(ctx, bytes.NewReader(random(13, 1<<20)), func(Chunk) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestUnmarshalRefusesBadIndexes(t *testing.T) {
	good := build(t, bytes.Join([][]byte{random(14, 1<<20), make([]byte, 1<<20), random(15, 1<<20)}, nil))
	enc, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if x, err := Unmarshal(enc); err != nil || x.Size != good.Size || len(x.Chunks) != len(good.Chunks) {
		t.Fatalf("round trip: %v", err)
	}
	with := func(f func(x *Index)) []byte {
		x := &Index{Size: good.Size, SHA256: good.SHA256, Chunks: append([]Entry(nil), good.Chunks...)}
		f(x)
		return x.MarshalUnchecked()
	}
	flip := append([]byte(nil), enc...)
	flip[headerLen+20] ^= 1
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"truncated", enc[:len(enc)-1], "truncated"},
		{"truncated mid-entry", enc[:headerLen+entryLen+7], "truncated"},
		{"trailing bytes", append(append([]byte(nil), enc...), 0), "after the"},
		{"not an index", append([]byte("cubeidx9"), enc[8:]...), "not a"},
		{"flipped bit", flip, "checksum"},
		{"overlap", with(func(x *Index) { x.Chunks[1].Offset -= BlockSize; x.Chunks[1].Length += BlockSize }), "overlaps"},
		{"gap", with(func(x *Index) { x.Chunks[1].Offset += BlockSize; x.Chunks[1].Length -= BlockSize }), "gap"},
		{"past the end", with(func(x *Index) { x.Chunks[len(x.Chunks)-1].Length += BlockSize }), "past the end"},
		{"short of the end", with(func(x *Index) { x.Size += BlockSize }), "the chunks end at"},
		{"offset far past the end", with(func(x *Index) { x.Chunks[0].Offset = 1 << 40 }), "gap"},
		{"empty chunk", with(func(x *Index) { x.Chunks = append([]Entry{{}}, x.Chunks...) }), "empty"},
		{"oversized data chunk", with(func(x *Index) {
			x.Chunks = []Entry{{Length: MaxDataLength + BlockSize}}
			x.Size = MaxDataLength + BlockSize
		}), "more than"},
		{"zero chunk with a sum", with(func(x *Index) {
			for i := range x.Chunks {
				if x.Chunks[i].Zero {
					x.Chunks[i].Sum[0] = 1
				}
			}
		}), "carries a sum"},
		{"more chunks than blocks", with(func(x *Index) {
			x.Size = 2
			x.Chunks = []Entry{{Length: 1}, {Offset: 1, Length: 1}}
		}), "more than one per block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal(tc.b)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrCorrupt saying %q", err, tc.want)
			}
		})
	}
}
