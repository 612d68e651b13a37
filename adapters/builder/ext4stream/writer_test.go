package ext4stream

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/ports"
)

// stats returns dumpe2fs -h's "key: value" lines.
func stats(t *testing.T, img string) map[string]string {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func mustFsck(t *testing.T, img string) {
	t.Helper()
	if rc, out := fsck(t, img); rc != 0 {
		t.Fatalf("e2fsck -fn exit %d:\n%s", rc, out)
	}
}

func TestHeadroomIsFreeAndUsable(t *testing.T) {
	const hb, hi = 64<<20 + 1, 5000
	img, res, err := build(t, richTree(t), func(s *ports.BuildSpec) { s.HeadroomBytes, s.HeadroomInodes = hb, hi })
	if err != nil {
		t.Fatal(err)
	}
	mustFsck(t, img)
	st := stats(t, img)
	if free := atoi(t, st["Free blocks"]) * blockSize; free < hb {
		t.Errorf("%d bytes free, asked for %d", free, hb)
	}
	if free := atoi(t, st["Free inodes"]); free < hi {
		t.Errorf("%d inodes free, asked for %d", free, hi)
	}
	plain, _, err := build(t, richTree(t))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(plain)
	// Headroom costs what it asks for plus inode tables and alignment.
	if extra := res.SizeBytes - fi.Size(); extra < hb || extra > hb+hi*inodeSize+4*Alignment {
		t.Errorf("headroom grew the image by %d bytes for %d bytes and %d inodes", extra, int64(hb), hi)
	}
	if os.Geteuid() != 0 {
		t.Skip("writing through a loop mount needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount unavailable: %v\n%s", err, out)
	}
	big := bytes.Repeat([]byte("headroom"), (hb-8<<20)/8)
	werr := os.WriteFile(filepath.Join(mnt, "fill"), big, 0o644)
	for i := 0; i < hi-100 && werr == nil; i++ {
		werr = os.WriteFile(filepath.Join(mnt, "many", fmt.Sprintf("new-%d", i)), nil, 0o644)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	if werr != nil {
		t.Fatalf("writing into the headroom: %v", werr)
	}
	mustFsck(t, img)
}

// TestInodeHeavyImageStaysSmall: more inodes than 32768 per 128 MiB of
// content need more groups than the blocks fill; the groups shrink instead
// of the image growing to hold them.
func TestInodeHeavyImageStaysSmall(t *testing.T) {
	es := []entry{dir("d", 0o755)}
	for i := range 70_000 {
		es = append(es, file(fmt.Sprintf("d/%d", i), 0o644, ""))
	}
	img, res, err := build(t, tarOf(t, es...), func(s *ports.BuildSpec) { s.HeadroomInodes = 30_000 })
	if err != nil {
		t.Fatal(err)
	}
	mustFsck(t, img)
	st := stats(t, img)
	if res.SizeBytes > 64<<20 {
		t.Errorf("70,000 empty files and 30,000 free inodes take %d bytes", res.SizeBytes)
	}
	if free := atoi(t, st["Free inodes"]); free < 30_000 {
		t.Errorf("%d free inodes", free)
	}
	t.Logf("%d bytes, %s blocks per group, %s inodes per group", res.SizeBytes, st["Blocks per group"], st["Inodes per group"])
}

// TestExtentTree: a file with thousands of extents (data and holes
// alternating) needs a two-level extent tree.
func TestExtentTree(t *testing.T) {
	const blocks = 6000
	body := make([]byte, blocks*blockSize+123)
	for b := 0; b < blocks; b += 2 {
		binary.LittleEndian.PutUint64(body[b*blockSize:], uint64(b)+1)
	}
	copy(body[len(body)-3:], "end")
	img, _, err := build(t, tarOf(t, file("frag", 0o644, string(body)), file("after", 0o644, "after")))
	if err != nil {
		t.Fatal(err)
	}
	mustFsck(t, img)
	ex := debugfs(t, img, "ex frag")
	if !strings.Contains(ex, "Level Entries") || !strings.Contains(ex, " 0/ 2 ") || !strings.Contains(ex, " 2/ 2 ") {
		t.Errorf("frag has no two-level extent tree:\n%s", ex[:min(len(ex), 600)])
	}
	out := filepath.Join(t.TempDir(), "frag")
	debugfs(t, img, "dump frag "+out)
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("frag read back differs (%d bytes, %v)", len(got), err)
	}
	if got := debugfs(t, img, "cat after"); !strings.Contains(got, "after") {
		t.Errorf("after: %q", got)
	}
}

// aclXattr encodes a POSIX ACL the way getxattr returns it.
func aclXattr(entries ...[3]uint32) string {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return string(b)
}

func TestPOSIXACLs(t *testing.T) {
	const noID = 0xFFFFFFFF
	access := aclXattr([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclUser, 5, 1000}, [3]uint32{aclGroupObj, 5, noID},
		[3]uint32{aclGroup, 4, 2000}, [3]uint32{aclMask, 7, noID}, [3]uint32{aclOther, 0, noID})
	def := aclXattr([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclGroupObj, 5, noID}, [3]uint32{aclOther, 5, noID})
	tree := tarOf(t,
		entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: "shared", Mode: 0o775, PAXRecords: map[string]string{
			"SCHILY.xattr.system.posix_acl_access":  access,
			"SCHILY.xattr.system.posix_acl_default": def,
		}}},
		entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "shared/f", Mode: 0o640, PAXRecords: map[string]string{
			"SCHILY.xattr.system.posix_acl_access": access,
		}}, Body: "f"},
	)
	img, _, err := build(t, tree)
	if err != nil {
		t.Fatal(err)
	}
	mustFsck(t, img)
	if os.Geteuid() != 0 {
		t.Skip("reading ACLs through the kernel needs a loop mount (root)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,ro", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount unavailable: %v\n%s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	for p, want := range map[string]map[string]string{
		"shared":   {"system.posix_acl_access": access, "system.posix_acl_default": def},
		"shared/f": {"system.posix_acl_access": access},
	} {
		for name, v := range want {
			buf := make([]byte, 256)
			n, err := unix.Lgetxattr(filepath.Join(mnt, p), name, buf)
			if err != nil || string(buf[:n]) != v {
				t.Errorf("%s %s = %x, %v; want %x", p, name, buf[:max(n, 0)], err, v)
			}
		}
	}
}

func TestMalformedACLIsRefused(t *testing.T) {
	tree := tarOf(t, entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, PAXRecords: map[string]string{
		"SCHILY.xattr.system.posix_acl_access": "garbage",
	}}})
	_, _, err := build(t, tree)
	if err == nil || !strings.Contains(err.Error(), "rejected: xattr-forbidden") {
		t.Fatalf("err = %v, want an xattr-forbidden refusal", err)
	}
}

func TestManySubdirectories(t *testing.T) {
	if testing.Short() {
		t.Skip("65,001 directories")
	}
	es := []entry{dir("d", 0o755)}
	for i := range linkMax + 1 {
		es = append(es, dir(fmt.Sprintf("d/%d", i), 0o755))
	}
	img, _, err := build(t, tarOf(t, es...))
	if err != nil {
		t.Fatal(err)
	}
	mustFsck(t, img)
	mustContain(t, "d", debugfs(t, img, "stat d"), "Links: 1")
}
