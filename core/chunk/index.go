package chunk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Version names the chunking rules and the index encoding; it is the
// index's magic number.
const Version = "cubeidx1"

// Entry is one chunk of an object.
type Entry struct {
	Offset int64
	Length uint32
	// Zero marks a chunk of zero bytes: no Sum, never stored or sent.
	Zero bool
	Sum  [sha256.Size]byte
}

// End is the offset just past the chunk.
func (e Entry) End() int64 { return e.Offset + int64(e.Length) }

// ID is the chunk's id: its sha256 in lower-case hex ("" for a zero chunk).
func (e Entry) ID() string {
	if e.Zero {
		return ""
	}
	return hex.EncodeToString(e.Sum[:])
}

// Index describes an object as its chunks.
type Index struct {
	Size   int64
	SHA256 [sha256.Size]byte
	Chunks []Entry
}

// SHA256Hex is the object's sha256 in lower-case hex.
func (x *Index) SHA256Hex() string { return hex.EncodeToString(x.SHA256[:]) }

// DataBytes is the total length of the data (non-zero) chunks.
func (x *Index) DataBytes() int64 {
	var n int64
	for _, e := range x.Chunks {
		if !e.Zero {
			n += int64(e.Length)
		}
	}
	return n
}

const (
	headerLen  = len(Version) + 8 + sha256.Size + 4
	entryLen   = 8 + 4 + 1 + sha256.Size
	trailerLen = sha256.Size
)

// EncodedLen is the size of the encoded index of n chunks.
func EncodedLen(n int) int { return headerLen + n*entryLen + trailerLen }

// MaxEncodedLen is the largest encoded index of an object of size bytes
// that follows the chunking rules (every chunk at least one block).
func MaxEncodedLen(size int64) int64 {
	return int64(EncodedLen(0)) + (size/BlockSize+1)*entryLen
}

// Marshal encodes the index after checking it (Check).
func (x *Index) Marshal() ([]byte, error) {
	if err := x.Check(); err != nil {
		return nil, err
	}
	return x.MarshalUnchecked(), nil
}

// MarshalUnchecked encodes the index as it is, with a valid checksum,
// without checking it: what a hostile server could send. Only tests of
// the refusals want it; everything else calls Marshal.
func (x *Index) MarshalUnchecked() []byte {
	b := make([]byte, 0, EncodedLen(len(x.Chunks)))
	b = append(b, Version...)
	b = binary.BigEndian.AppendUint64(b, uint64(x.Size))
	b = append(b, x.SHA256[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(x.Chunks)))
	for _, e := range x.Chunks {
		b = binary.BigEndian.AppendUint64(b, uint64(e.Offset))
		b = binary.BigEndian.AppendUint32(b, e.Length)
		kind := byte(0)
		if e.Zero {
			kind = 1
		}
		b = append(b, kind)
		b = append(b, e.Sum[:]...)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// Unmarshal decodes and checks an index. Any defect (truncation, trailing
// bytes, a checksum that does not match, chunks that overlap, leave gaps,
// run past the end or break the size rules) is an error wrapping
// ErrCorrupt that names it.
func Unmarshal(b []byte) (*Index, error) {
	if len(b) < EncodedLen(0) {
		return nil, corrupt("truncated: %d bytes, less than an empty index", len(b))
	}
	if string(b[:len(Version)]) != Version {
		return nil, corrupt("not a %s index", Version)
	}
	n := binary.BigEndian.Uint32(b[headerLen-4:])
	if want := EncodedLen(int(n)); len(b) != want {
		if len(b) < want {
			return nil, corrupt("truncated: %d bytes for %d chunks, want %d", len(b), n, want)
		}
		return nil, corrupt("%d bytes after the %d chunks", len(b)-want, n)
	}
	body := b[:len(b)-trailerLen]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], b[len(body):]) {
		return nil, corrupt("checksum does not match")
	}
	x := &Index{Size: int64(binary.BigEndian.Uint64(b[len(Version):]))}
	copy(x.SHA256[:], b[len(Version)+8:])
	x.Chunks = make([]Entry, n)
	p := b[headerLen:]
	for i := range x.Chunks {
		e := &x.Chunks[i]
		off := binary.BigEndian.Uint64(p)
		if off > 1<<62 {
			return nil, corrupt("chunk %d: offset %d out of range", i, off)
		}
		e.Offset = int64(off)
		e.Length = binary.BigEndian.Uint32(p[8:])
		switch p[12] {
		case 0:
		case 1:
			e.Zero = true
		default:
			return nil, corrupt("chunk %d: unknown kind %d", i, p[12])
		}
		copy(e.Sum[:], p[13:])
		p = p[entryLen:]
	}
	if err := x.Check(); err != nil {
		return nil, err
	}
	return x, nil
}

// Check verifies that the chunks cover the object exactly, in order: the
// first at 0, each where the one before ended (no overlap, no gap), the
// last ending at Size, every length within the rules, zero chunks without
// a sum.
func (x *Index) Check() error {
	if x.Size < 0 || x.Size > 1<<62 {
		return corrupt("object size %d out of range", x.Size)
	}
	if int64(len(x.Chunks)) > x.Size/BlockSize+1 {
		return corrupt("%d chunks for %d bytes: more than one per block", len(x.Chunks), x.Size)
	}
	var at int64
	for i, e := range x.Chunks {
		switch {
		case e.Offset != at && e.Offset < at:
			return corrupt("chunk %d at %d overlaps the chunk before it (which ends at %d)", i, e.Offset, at)
		case e.Offset != at:
			return corrupt("chunk %d at %d leaves a gap after %d", i, e.Offset, at)
		case e.Length == 0:
			return corrupt("chunk %d is empty", i)
		case e.End() > x.Size:
			return corrupt("chunk %d (%d bytes at %d) runs past the end of the %d-byte object", i, e.Length, e.Offset, x.Size)
		case e.Zero && e.Length > MaxZeroLength:
			return corrupt("zero chunk %d is %d bytes, more than %d", i, e.Length, MaxZeroLength)
		case !e.Zero && e.Length > MaxDataLength:
			return corrupt("chunk %d is %d bytes, more than %d", i, e.Length, MaxDataLength)
		case e.Zero && e.Sum != [sha256.Size]byte{}:
			return corrupt("zero chunk %d carries a sum", i)
		}
		at = e.End()
	}
	if at != x.Size {
		return corrupt("the chunks end at %d, the object at %d", at, x.Size)
	}
	return nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("chunk index: %s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
}
