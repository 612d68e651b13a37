package chunk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
)

// Chunking parameters. They are part of the format: changing them changes
// every index (bump Version).
const (
	// BlockSize is the unit boundaries fall between (ext4's block).
	BlockSize = 4096
	// MinBlocks is the fewest blocks of a data chunk, and of a run of zero
	// blocks that becomes a zero chunk.
	MinBlocks = 4
	// AvgBlocks sets how often a block past MinBlocks ends a data chunk:
	// one in AvgBlocks (a power of two).
	AvgBlocks = 16
	// MaxBlocks is the most blocks of a data chunk (256 KiB).
	MaxBlocks = 64
	// MaxZeroLength is the longest zero chunk.
	MaxZeroLength = 1 << 30
	// MaxDataLength is the longest data chunk.
	MaxDataLength = MaxBlocks * BlockSize
)

// Chunk is one chunk found by Split. Data is the chunk's bytes (nil for a
// zero chunk); it is valid only during the callback.
type Chunk struct {
	Entry
	Data []byte
}

var zeroBlock [BlockSize]byte

// cutHash is the boundary hash of one block: eight words sampled across
// it, mixed. Only blocks of a full BlockSize are sampled; a short last
// block ends the object anyway.
func cutHash(b []byte) uint64 {
	var h uint64 = 0x9e3779b97f4a7c15
	for i := 0; i < 8; i++ {
		w := binary.LittleEndian.Uint64(b[i*512+((i*61)&511)&^7:])
		h ^= w
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h
}

// splitter is Split's state between blocks.
type splitter struct {
	emit func(Chunk) error
	off  int64 // offset of the chunk being built
	// data chunk being built: its bytes, and zero blocks seen after them
	// that are not yet part of it (they may become a zero chunk).
	data    []byte
	pending int // trailing zero blocks not yet in data
	// zero chunk being built (zlen > 0)
	zlen int64
}

// Split reads r to its end and calls emit with every chunk, in order. It
// returns the object's size. emit's error stops it and is returned as is.
func Split(ctx context.Context, r io.Reader, emit func(Chunk) error) (int64, error) {
	s := &splitter{emit: emit, data: make([]byte, 0, MaxDataLength)}
	r = ctxReader{ctx, r}
	buf := make([]byte, 4<<20)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, rerr := io.ReadFull(r, buf)
		for o := 0; o < n; o += BlockSize {
			if err := s.block(buf[o:min(o+BlockSize, n)]); err != nil {
				return total, err
			}
		}
		total += int64(n)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return total, rerr
		}
	}
	return total, s.end()
}

func (s *splitter) block(b []byte) error {
	zero := bytes.Equal(b, zeroBlock[:len(b)])
	if s.zlen > 0 {
		if zero && s.zlen+int64(len(b)) <= MaxZeroLength {
			s.zlen += int64(len(b))
			return nil
		}
		if err := s.flushZero(); err != nil {
			return err
		}
		if zero {
			s.zlen = int64(len(b))
			return nil
		}
	}
	if zero && len(b) == BlockSize {
		s.pending++
		if s.pending < MinBlocks {
			if len(s.data)/BlockSize+s.pending >= MaxBlocks {
				s.takePending()
				return s.flushData()
			}
			return nil
		}
		// A run long enough to stand alone: the data before it ends,
		// the run goes on as a zero chunk.
		run := int64(s.pending) * BlockSize
		s.pending = 0
		if err := s.flushData(); err != nil {
			return err
		}
		s.zlen = run
		return nil
	}
	s.takePending()
	s.data = append(s.data, b...)
	blocks := (len(s.data) + BlockSize - 1) / BlockSize
	if blocks >= MaxBlocks || (blocks >= MinBlocks && len(b) == BlockSize && cutHash(b)&(AvgBlocks-1) == AvgBlocks-1) {
		return s.flushData()
	}
	return nil
}

// takePending moves the zero blocks held back into the data chunk.
func (s *splitter) takePending() {
	for ; s.pending > 0; s.pending-- {
		s.data = append(s.data, zeroBlock[:]...)
	}
}

func (s *splitter) flushData() error {
	if len(s.data) == 0 {
		return nil
	}
	c := Chunk{Entry: Entry{Offset: s.off, Length: uint32(len(s.data)), Sum: sha256.Sum256(s.data)}, Data: s.data}
	s.off += int64(len(s.data))
	s.data = s.data[:0]
	return s.emit(c)
}

func (s *splitter) flushZero() error {
	c := Chunk{Entry: Entry{Offset: s.off, Length: uint32(s.zlen), Zero: true}}
	s.off += s.zlen
	s.zlen = 0
	return s.emit(c)
}

func (s *splitter) end() error {
	if s.zlen > 0 {
		return s.flushZero()
	}
	s.takePending()
	return s.flushData()
}

// ErrCorrupt is wrapped by errors about an index or a chunk that is not
// what it claims to be.
var ErrCorrupt = errors.New("corrupt chunk data")

// ctxReader stops reading once ctx ends, between any two reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
