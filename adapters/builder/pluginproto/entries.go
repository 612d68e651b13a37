package pluginproto

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// APIVersionEntries builds: the host sends the tree's headers with, for
// each file, where its content lies in a file the host holds open; the
// plugin opens that file through /proc/<host pid>/fd/<fd> (the spool files
// are unlinked, so they have no other name) and reads the content in
// place. No content byte crosses the boundary: the kernel copies it once,
// from the host's page cache into the image.

// batchBytes bounds an EntryBatch well under gRPC's 4 MiB message limit.
// One entry stays under it too: names, links and xattrs are bounded by the
// flattener's limits, and a file's zero-run list longer than maxZeroRuns is
// not sent (the plugin then finds the zero blocks by reading the content,
// as for any entry whose runs are unknown; the image is the same).
const (
	batchBytes  = 1 << 20
	maxZeroRuns = 64 << 10
)

// sendEntries sends the spec, then the entries in batches. Like sendTree
// it returns only errors of its own side (a bad entry, cancellation): a
// plugin that ends the call early (Send fails) says why in its answer.
func sendEntries(ctx context.Context, stream RootfsBuilder_BuildClient, head *BuildSpec, tree ports.Tree) error {
	if err := stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}}); err != nil {
		return nil
	}
	pid := os.Getpid()
	sources := map[*os.File]uint32{}
	batch := &EntryBatch{}
	size := 0
	flush := func() bool {
		if len(batch.Entries) == 0 && len(batch.Sources) == 0 {
			return true
		}
		err := stream.Send(&BuildRequest{Msg: &BuildRequest_Entries{Entries: batch}})
		batch, size = &EntryBatch{}, 0
		return err == nil
	}
	for i := range tree.Len() {
		if i%1024 == 0 && ctx.Err() != nil {
			// Never end the stream early: the plugin would take the
			// entries so far for the whole tree.
			return fmt.Errorf("build: %w", ctx.Err())
		}
		e, err := tree.Entry(i)
		if err != nil {
			return fmt.Errorf("read tree entry %d: %w", i, err)
		}
		if e.Header == nil {
			return fmt.Errorf("tree entry %d has no header: %w", i, core.ErrInvalidArgument)
		}
		m := entryMessage(e.Header)
		m.Layer = uint32(max(0, e.Layer))
		if e.Header.Typeflag == tar.TypeReg && e.Header.Size > 0 {
			if e.File == nil {
				return fmt.Errorf("tree entry %q: %d bytes of content and no file: %w", e.Header.Name, e.Header.Size, core.ErrInvalidArgument)
			}
			n, ok := sources[e.File]
			if !ok {
				n = uint32(len(sources) + 1)
				sources[e.File] = n
				p := []byte(fmt.Sprintf("/proc/%d/fd/%d", pid, e.File.Fd()))
				batch.Sources = append(batch.Sources, p)
				size += len(p) + 4
			}
			m.Source, m.SourceOffset = n, e.Offset
			if e.ZeroKnown && len(e.Zero) <= maxZeroRuns {
				m.ZeroKnown = true
				m.ZeroRuns = make([]uint32, 0, 2*len(e.Zero))
				for _, r := range e.Zero {
					m.ZeroRuns = append(m.ZeroRuns, r[0], r[1])
				}
			}
		}
		batch.Entries = append(batch.Entries, m)
		if size += proto.Size(m) + 4; size >= batchBytes && !flush() {
			return nil
		}
	}
	flush()
	return nil
}

func entryMessage(h *tar.Header) *TreeEntry {
	m := &TreeEntry{
		Typeflag: uint32(h.Typeflag),
		Name:     []byte(h.Name),
		Linkname: []byte(h.Linkname),
		Size:     h.Size,
		Mode:     h.Mode,
		Uid:      int64(h.Uid),
		Gid:      int64(h.Gid),
		Uname:    []byte(h.Uname),
		Gname:    []byte(h.Gname),
		Mtime:    timeMessage(h.ModTime),
		Atime:    timeMessage(h.AccessTime),
		Ctime:    timeMessage(h.ChangeTime),
		Devmajor: h.Devmajor,
		Devminor: h.Devminor,
		Format:   int32(h.Format),
	}
	for k, v := range h.PAXRecords {
		m.PaxRecords = append(m.PaxRecords, &PAXRecord{Key: []byte(k), Value: []byte(v)})
	}
	return m
}

func timeMessage(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeOf(m *timestamppb.Timestamp) time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.AsTime()
}

// headerOf is the tar header an entry message carries.
func headerOf(m *TreeEntry) (*tar.Header, error) {
	if m.GetTypeflag() > 0xFF {
		return nil, fmt.Errorf("entry %q: type flag %d", m.GetName(), m.GetTypeflag())
	}
	h := &tar.Header{
		Typeflag:   byte(m.GetTypeflag()),
		Name:       string(m.GetName()),
		Linkname:   string(m.GetLinkname()),
		Size:       m.GetSize(),
		Mode:       m.GetMode(),
		Uid:        int(m.GetUid()),
		Gid:        int(m.GetGid()),
		Uname:      string(m.GetUname()),
		Gname:      string(m.GetGname()),
		ModTime:    timeOf(m.GetMtime()),
		AccessTime: timeOf(m.GetAtime()),
		ChangeTime: timeOf(m.GetCtime()),
		Devmajor:   m.GetDevmajor(),
		Devminor:   m.GetDevminor(),
		Format:     tar.Format(m.GetFormat()),
	}
	if len(m.GetPaxRecords()) > 0 {
		h.PAXRecords = make(map[string]string, len(m.GetPaxRecords()))
		for _, r := range m.GetPaxRecords() {
			h.PAXRecords[string(r.GetKey())] = string(r.GetValue())
		}
	}
	return h, nil
}

// receiveEntries reads the entry batches that follow an entries spec to
// the end of the stream, opening each content source once; close closes
// them. The entries are valid until close. A stream that ends before the
// count the spec announced is refused: the host stopped sending (it was
// cancelled, or failed), and the entries so far are not the tree.
func receiveEntries(ctx context.Context, stream RootfsBuilder_BuildServer, count int64) (entries []ports.TreeEntry, closeAll func(), err error) {
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			f.Close()
		}
	}
	fail := func(err error) ([]ports.TreeEntry, func(), error) {
		closeAll()
		return nil, func() {}, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(status.FromContextError(err).Err())
		}
		msg, err := stream.Recv()
		if err == io.EOF {
			if err := ctx.Err(); err != nil {
				return fail(status.FromContextError(err).Err())
			}
			if int64(len(entries)) != count {
				return fail(status.Errorf(codes.InvalidArgument, "build stream: %d entries arrived, the spec announced %d: invalid argument", len(entries), count))
			}
			return entries, closeAll, nil
		}
		if err != nil {
			return fail(err)
		}
		b := msg.GetEntries()
		if b == nil {
			return fail(status.Error(codes.InvalidArgument, "build stream: an entries build takes only entry batches after the spec: invalid argument"))
		}
		for _, p := range b.GetSources() {
			f, err := os.Open(string(p))
			if err != nil {
				// The usual cause is a plugin that runs as another user than
				// the host (or without the host's /proc): say what to do.
				return fail(status.Errorf(codes.InvalidArgument, "content source %q: %v (a plugin reads the host's files in place: run it as the host's user, with the host's /proc): invalid argument", p, err))
			}
			files = append(files, f)
		}
		for _, m := range b.GetEntries() {
			h, err := headerOf(m)
			if err != nil {
				return fail(status.Errorf(codes.InvalidArgument, "%v: invalid argument", err))
			}
			e := ports.TreeEntry{Header: h, Layer: int(m.GetLayer())}
			if n := m.GetSource(); n > 0 {
				if int(n) > len(files) {
					return fail(status.Errorf(codes.InvalidArgument, "entry %q: content source %d of %d: invalid argument", h.Name, n, len(files)))
				}
				e.File, e.Offset = files[n-1], m.GetSourceOffset()
			}
			if m.GetZeroKnown() {
				z := m.GetZeroRuns()
				if len(z)%2 != 0 {
					return fail(status.Errorf(codes.InvalidArgument, "entry %q: odd zero run list: invalid argument", h.Name))
				}
				e.ZeroKnown = true
				e.Zero = make([][2]uint32, 0, len(z)/2)
				for i := 0; i < len(z); i += 2 {
					e.Zero = append(e.Zero, [2]uint32{z[i], z[i+1]})
				}
			}
			entries = append(entries, e)
		}
	}
}
