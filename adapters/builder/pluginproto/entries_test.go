package pluginproto

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// plannedFake builds from entries (a ports.RootfsBuilder): it reads every
// entry's content through the file it got and records what arrived.
type plannedFake struct {
	// entries runs in place of the recording build; nil records.
	entries func(ctx context.Context, spec ports.BuildSpec, es ports.TreeSlice) (ports.BuildResult, error)

	mu       sync.Mutex
	got      ports.TreeSlice
	contents [][]byte
	spec     ports.BuildSpec
}

func (p *plannedFake) Name() string   { return "fake" }
func (p *plannedFake) Format() string { return "fake/1" }

func (p *plannedFake) Build(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	es, err := ports.TreeEntries(tree)
	if err != nil {
		return ports.BuildResult{}, err
	}
	if p.entries != nil {
		return p.entries(ctx, spec, es)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spec, p.got, p.contents = spec, es, nil
	for _, e := range es {
		var b []byte
		if e.File != nil {
			b = make([]byte, e.Header.Size)
			if _, err := e.File.ReadAt(b, e.Offset); err != nil {
				return ports.BuildResult{}, err
			}
		}
		p.contents = append(p.contents, b)
	}
	return ports.BuildResult{SizeBytes: 2 << 20, SHA256: strings.Repeat("ab", 32)}, nil
}

// unlinkedFile is a spool as the flattener makes them: written, then
// removed, so only its descriptor reaches the content.
func unlinkedFile(t *testing.T, content []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "spool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.Name()); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestV3EntriesCrossTheWire(t *testing.T) {
	pf := &plannedFake{}
	c := connect(t, &GRPCPlugin{Impl: pf})
	spoolA := unlinkedFile(t, []byte("0123456789abcdefghij"))
	spoolB := unlinkedFile(t, bytes.Repeat([]byte{7}, 9000))
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	entries := ports.TreeSlice{
		{Header: &tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755, ModTime: when, Format: tar.FormatPAX}},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "etc/a", Mode: 0o4755, Uid: 7, Gid: 8, Uname: "u", Gname: "g", Size: 10,
			ModTime: when, AccessTime: when.Add(time.Second), ChangeTime: when.Add(2 * time.Second),
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\xff\xfe", "SCHILY.xattr.user.k": "v"}},
			File: spoolA, Offset: 10},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "bin/\xff\xfename", Mode: 0o644, Size: 9000, ModTime: when},
			File: spoolB, Zero: [][2]uint32{}, ZeroKnown: true},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "etc/b", Mode: 0o600, Size: 5}, File: spoolA, Offset: 0,
			Zero: [][2]uint32{{0, 1}}, ZeroKnown: true},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "empty", Mode: 0o644}},
		{Header: &tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "etc/\x80a", ModTime: when}},
		{Header: &tar.Header{Typeflag: tar.TypeLink, Name: "hard", Linkname: "etc/a"}},
		{Header: &tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}},
	}
	spec := ports.BuildSpec{OutPath: "/data/x.ext4", UUID: "6f1c2a8e-3d4b-4c5d-9e6f-0a1b2c3d4e5f", Time: when,
		HeadroomBytes: 1, HeadroomInodes: 2, MaxSizeBytes: 3}
	res, err := c.Build(context.Background(), APIVersionEntries, spec, entries)
	if err != nil {
		t.Fatal(err)
	}
	if res.SizeBytes != 2<<20 || res.SHA256 != strings.Repeat("ab", 32) {
		t.Errorf("result %+v", res)
	}
	if got := pf.spec; got.OutPath != spec.OutPath || got.UUID != spec.UUID || !got.Time.Equal(when) ||
		got.HeadroomBytes != 1 || got.HeadroomInodes != 2 || got.MaxSizeBytes != 3 {
		t.Errorf("spec arrived as %+v", got)
	}
	if len(pf.got) != len(entries) {
		t.Fatalf("%d entries arrived, sent %d", len(pf.got), len(entries))
	}
	wantContent := [][]byte{nil, []byte("abcdefghij"), bytes.Repeat([]byte{7}, 9000), []byte("01234"), nil, nil, nil, nil}
	for i, e := range entries {
		g := pf.got[i]
		if !headersEqual(g.Header, e.Header) {
			t.Errorf("entry %d: header arrived as %+v, sent %+v", i, g.Header, e.Header)
		}
		if g.ZeroKnown != e.ZeroKnown || fmt.Sprint(g.Zero) != fmt.Sprint(e.Zero) {
			t.Errorf("entry %d: zero runs %v (known %v), sent %v (known %v)", i, g.Zero, g.ZeroKnown, e.Zero, e.ZeroKnown)
		}
		if !bytes.Equal(pf.contents[i], wantContent[i]) {
			t.Errorf("entry %d: content %q, want %q", i, pf.contents[i], wantContent[i])
		}
	}
	if pf.got[1].File != pf.got[3].File {
		t.Error("two entries of one spool arrived with two files: each source must be opened once")
	}
}

// headersEqual compares what the tree contract uses; times compare as
// instants (they come back in UTC).
func headersEqual(a, b *tar.Header) bool {
	return a.Typeflag == b.Typeflag && a.Name == b.Name && a.Linkname == b.Linkname && a.Size == b.Size &&
		a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid && a.Uname == b.Uname && a.Gname == b.Gname &&
		a.ModTime.Equal(b.ModTime) && a.AccessTime.Equal(b.AccessTime) && a.ChangeTime.Equal(b.ChangeTime) &&
		a.Devmajor == b.Devmajor && a.Devminor == b.Devminor && a.Format == b.Format &&
		(len(a.PAXRecords) == 0 && len(b.PAXRecords) == 0 || reflect.DeepEqual(a.PAXRecords, b.PAXRecords))
}

// A tree larger than one batch arrives whole and in order.
func TestV3ManyEntriesInBatches(t *testing.T) {
	pf := &plannedFake{}
	c := connect(t, &GRPCPlugin{Impl: pf})
	spool := unlinkedFile(t, []byte("x"))
	long := strings.Repeat("d", 200)
	var entries ports.TreeSlice
	for i := range 30000 { // about 8 MiB of messages
		entries = append(entries, ports.TreeEntry{
			Header: &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/%06d", long, i), Mode: 0o644, Size: 1},
			File:   spool,
		})
	}
	if _, err := c.Build(context.Background(), APIVersionEntries, ports.BuildSpec{OutPath: "/x"}, entries); err != nil {
		t.Fatal(err)
	}
	if len(pf.got) != len(entries) {
		t.Fatalf("%d entries arrived, sent %d", len(pf.got), len(entries))
	}
	for i, e := range pf.got {
		if e.Header.Name != entries[i].Header.Name || string(pf.contents[i]) != "x" {
			t.Fatalf("entry %d arrived as %q with %q", i, e.Header.Name, pf.contents[i])
		}
	}
}

// A plugin whose builder reads only tar refuses a build from entries by its
// version, even if the host asks.
func TestV3NeedsAnEntriesBuilder(t *testing.T) {
	c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{}})
	_, err := c.Build(context.Background(), APIVersionEntries, ports.BuildSpec{OutPath: "/x"}, ports.TreeSlice(nil))
	if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), "v3") {
		t.Fatalf("err = %v, want ErrUnsupported naming v3", err)
	}
}

// The host refuses an answer whose sha256 is not one, and removes what the
// plugin wrote.
func TestV3MalformedSHA256(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	pf := &plannedFake{entries: func(_ context.Context, spec ports.BuildSpec, _ ports.TreeSlice) (ports.BuildResult, error) {
		if err := os.WriteFile(spec.OutPath, []byte("image"), 0o644); err != nil {
			return ports.BuildResult{}, err
		}
		return ports.BuildResult{SizeBytes: 5, SHA256: "ABC"}, nil
	}}
	c := connect(t, &GRPCPlugin{Impl: pf})
	_, err := c.Build(context.Background(), APIVersionEntries, ports.BuildSpec{OutPath: out}, ports.TreeSlice(nil))
	if err == nil || !strings.Contains(err.Error(), `sha256 "ABC"`) {
		t.Fatalf("err = %v, want the malformed sha256 named", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("the image is still there (%v)", serr)
	}
	// A well-formed one passes through as is.
	sum := sha256.Sum256([]byte("image"))
	pf.entries = func(context.Context, ports.BuildSpec, ports.TreeSlice) (ports.BuildResult, error) {
		return ports.BuildResult{SizeBytes: 5, SHA256: hex.EncodeToString(sum[:])}, nil
	}
	res, err := c.Build(context.Background(), APIVersionEntries, ports.BuildSpec{OutPath: out}, ports.TreeSlice(nil))
	if err != nil || res.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("res %+v, err %v", res, err)
	}
}

// Cancelling the host's build reaches the plugin's BuildEntries, and the
// call returns once the plugin has cleaned up.
func TestV3CancelReachesThePlugin(t *testing.T) {
	started := make(chan struct{})
	var cleaned sync.WaitGroup
	cleaned.Add(1)
	pf := &plannedFake{entries: func(ctx context.Context, _ ports.BuildSpec, _ ports.TreeSlice) (ports.BuildResult, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // cleanup
		cleaned.Done()
		return ports.BuildResult{}, ctx.Err()
	}}
	c := connect(t, &GRPCPlugin{Impl: pf})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := c.Build(ctx, APIVersionEntries, ports.BuildSpec{OutPath: "/x"}, ports.TreeSlice(nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	cleaned.Wait() // returns at once if the plugin finished before the call did
}

// A plugin given a source it cannot open says so, as bad input.
func TestV3UnreadableSource(t *testing.T) {
	c := connect(t, &GRPCPlugin{Impl: &plannedFake{}})
	stream, err := c.rpc.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	head := specMessage(APIVersionEntries, "id", ports.BuildSpec{OutPath: "/x"})
	head.Entries = true
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}})
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Entries{Entries: &EntryBatch{Sources: [][]byte{[]byte("/nonexistent/spool")}}}})
	_, err = stream.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "/nonexistent/spool") ||
		!strings.Contains(err.Error(), "run it as the host's user") {
		t.Fatalf("err = %v, want InvalidArgument naming the source and the way out", err)
	}
	// And a chunk in an entries build is refused too.
	stream, _ = c.rpc.Build(context.Background())
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}})
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Chunk{Chunk: []byte("tar")}})
	if _, err = stream.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("chunk in an entries build: err = %v, want InvalidArgument", err)
	}
}

// A stream that ends before the announced count is a broken build: the
// plugin must not take the entries so far for the tree (the host closes
// its side cleanly when it gives up, e.g. cancelled before the plugin
// registered the build).
func TestV3TruncatedStreamRefused(t *testing.T) {
	pf := &plannedFake{}
	c := connect(t, &GRPCPlugin{Impl: pf})
	stream, err := c.rpc.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	head := specMessage(APIVersionEntries, "id", ports.BuildSpec{OutPath: "/x"})
	head.Entries, head.EntryCount = true, 2
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}})
	_ = stream.Send(&BuildRequest{Msg: &BuildRequest_Entries{Entries: &EntryBatch{Entries: []*TreeEntry{
		entryMessage(&tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755})}}}})
	_, err = stream.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1 entries arrived, the spec announced 2") {
		t.Fatalf("err = %v, want the truncated stream refused", err)
	}
	if pf.got != nil {
		t.Fatalf("the plugin built from %d entries of a truncated stream", len(pf.got))
	}
}

// A file whose zero-run list would not fit a message goes without it; the
// plugin then finds the zero blocks itself.
func TestV3LongZeroRunListNotSent(t *testing.T) {
	var got ports.TreeSlice
	pf := &plannedFake{entries: func(_ context.Context, _ ports.BuildSpec, es ports.TreeSlice) (ports.BuildResult, error) {
		got = es // the content is not read: only the lists matter here
		return ports.BuildResult{}, nil
	}}
	c := connect(t, &GRPCPlugin{Impl: pf})
	const blocks = 2*maxZeroRuns + 2
	spool := unlinkedFile(t, []byte("x"))
	var runs [][2]uint32
	for b := uint32(0); b < blocks; b += 2 { // every other block zero: one run each
		runs = append(runs, [2]uint32{b, 1})
	}
	short := [][2]uint32{{0, 3}}
	entries := ports.TreeSlice{
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "long", Mode: 0o644, Size: blocks * 4096}, File: spool, Zero: runs, ZeroKnown: true},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "short", Mode: 0o644, Size: 3 * 4096}, File: spool, Zero: short, ZeroKnown: true},
	}
	if _, err := c.Build(context.Background(), APIVersionEntries, ports.BuildSpec{OutPath: "/x"}, entries); err != nil {
		t.Fatal(err)
	}
	if g := got[0]; g.ZeroKnown || g.Zero != nil {
		t.Errorf("the long list arrived (known %v, %d runs)", g.ZeroKnown, len(g.Zero))
	}
	if g := got[1]; !g.ZeroKnown || fmt.Sprint(g.Zero) != fmt.Sprint(short) {
		t.Errorf("the short list arrived as %v (known %v)", g.Zero, g.ZeroKnown)
	}
}
