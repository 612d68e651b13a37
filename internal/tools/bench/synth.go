package bench

import (
	"archive/tar"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
)

// Generated content for the scale part's big image, shaped like a Rust
// toolchain (rustup's stable toolchain with rust-src): many small source
// files in deep trees, and some large binaries and libraries. Everything is
// seeded, so the same seed and sizes give the same layer byte for byte, on
// every machine; and nothing is all zeros or a repeated pattern: gzip
// leaves the sources at about 0.36 of their size (real source code: 0.25
// to 0.35) and the binaries at about 0.4 (real ones: 0.3 to 0.5), so
// decoding them costs about what a real toolchain's layers cost. (A first
// mix left the binaries at 0.6: more bytes to inflate per byte written,
// which made the big image's build look less linear than it is.)

// sourceWords are the tokens the generated sources are made of; every
// fourth one gets a random suffix, so the text is not one long repetition.
var sourceWords = strings.Fields(`fn let mut pub struct impl trait enum match if else for in while loop return
self Self use mod crate super where as ref move dyn unsafe const static type Option Some None Result Ok Err
Vec String Box Rc Arc usize u8 u32 u64 i32 i64 bool str char len iter map collect unwrap expect into from
new default clone push pop get insert remove is_empty as_ref borrow write read fmt Debug Display Error
{ } ( ) [ ] ; : :: , . -> => & * = == != < > + - / # ! ? // /// value index item buf ptr alloc layout node`)

// crates are the top directories the sources go in, like library/ of
// rust-src and the compiler's own crates.
var crates = strings.Fields(`core alloc std proc_macro test panic_unwind backtrace stdarch portable-simd
hashbrown compiler_builtins libc cfg-if unicode-width rustc_middle rustc_ast rustc_parse rustc_typeck
rustc_codegen_llvm rustc_mir_transform rustc_resolve rustc_errors rustc_span rustc_session rustc_target
rustc_data_structures rustc_index rustc_lint rustc_borrowck rustc_trait_selection`)

// levelWords name the directories of a crate's tree, one word a level.
var levelWords = []string{"sys", "io", "fmt", "ops", "iter", "sync"}

// addSources adds files generated source files under dir, in trees two to
// six directories deep below each crate's src (two subdirectories a level:
// about one directory for eight files, as in rust-src), each file between
// 64 bytes and 64 KiB (about 5 KB on average).
func (w *layerWriter) addSources(dir string, seed uint64, files int) error {
	r := rand.New(rand.NewPCG(seed, 11))
	var body []byte
	for i := range files {
		crate := crates[(i/997)%len(crates)]
		parts := []string{dir, crate, fmt.Sprintf("v%d", i/(997*len(crates))), "src"}
		for level := range 2 + r.IntN(5) {
			parts = append(parts, fmt.Sprintf("%s%d", levelWords[level], r.IntN(2)))
		}
		name := path.Join(append(parts, fmt.Sprintf("f%06d.rs", i))...)
		size := min(64<<10, 64+int(r.ExpFloat64()*5000))
		body = sourceText(r, body[:0], size)
		if err := w.parents(name); err != nil {
			return err
		}
		if err := w.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(size), ModTime: w.mtime}); err != nil {
			return err
		}
		if _, err := w.tw.Write(body); err != nil {
			return err
		}
		w.content += int64(size)
	}
	return nil
}

// sourceText appends exactly size bytes of source-like text to b.
func sourceText(r *rand.Rand, b []byte, size int) []byte {
	start := len(b)
	for len(b)-start < size {
		b = append(b, sourceWords[r.IntN(len(sourceWords))]...)
		switch r.IntN(8) {
		case 0, 1:
			b = fmt.Appendf(b, "_%x", r.IntN(1<<16))
		case 2:
			b = append(b, '\n', ' ', ' ', ' ', ' ')
		}
		b = append(b, ' ')
	}
	return b[:start+size]
}

// binaryNames are the large files of the toolchain layer, used in turn.
var binaryNames = []string{"lib/librustc_driver-%04x.so", "lib/libLLVM-%04x.so", "bin/rustc-%04x", "bin/cargo-%04x",
	"lib/rustlib/x86_64-unknown-linux-gnu/lib/libstd-%04x.rlib", "lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-lld-%04x",
	"bin/rust-analyzer-%04x", "lib/rustlib/x86_64-unknown-linux-gnu/lib/libcore-%04x.rlib"}

// addBinaries adds n bytes of large generated binaries under dir, each
// between 8 and 256 MiB.
func (w *layerWriter) addBinaries(dir string, seed uint64, n int64) error {
	r := rand.New(rand.NewPCG(seed, 13))
	g := newBinaryGen(seed)
	buf := make([]byte, 1<<20)
	for i := 0; n > 0; i++ {
		size := min(n, int64(8<<20+r.IntN(248<<20)))
		name := path.Join(dir, fmt.Sprintf(binaryNames[i%len(binaryNames)], i))
		if err := w.addFile(name, 0o755, size, buf, g.fill); err != nil {
			return err
		}
		n -= size
	}
	return nil
}

// binaryGen makes binary-like bytes in 4 KiB blocks: some random (packed
// data, hashes), some of few distinct byte values (code, tables), some a
// near copy of a block shortly before (repeated code and relocations), so
// that gzip finds both literals to entropy-code and matches to reference.
type binaryGen struct {
	r    *rand.ChaCha8
	pick *rand.Rand
	hist [8][4096]byte // the last blocks (gzip's 32 KiB window), for copies
	n    int
}

func newBinaryGen(seed uint64) *binaryGen {
	var s [32]byte
	s[0], s[1], s[2] = byte(seed), byte(seed>>8), 0xb1
	return &binaryGen{r: rand.NewChaCha8(s), pick: rand.New(rand.NewPCG(seed, 17))}
}

// fill writes len(b) bytes (a multiple of 4 KiB, or the last piece of a
// file) of generated content.
func (g *binaryGen) fill(b []byte) {
	for len(b) > 0 {
		blk := &g.hist[g.n%len(g.hist)]
		switch k := g.pick.IntN(10); {
		case k < 2 || g.n < len(g.hist): // random
			_, _ = g.r.Read(blk[:])
		case k < 4: // few byte values: 4 bits of entropy a byte
			_, _ = g.r.Read(blk[:])
			for i := range blk {
				blk[i] = 0x40 | blk[i]&0x0f
			}
		default: // an earlier block, a few bytes changed
			*blk = g.hist[(g.n+1+g.pick.IntN(len(g.hist)-1))%len(g.hist)]
			for range 8 {
				blk[g.pick.IntN(len(blk))] = byte(g.pick.Uint32())
			}
		}
		g.n++
		b = b[copy(b, blk[:]):]
	}
}
