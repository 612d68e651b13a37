package ext4build

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/Microsoft/hcsshim/ext4/tar2ext4"

	"github.com/cubesandbox/templatecenter/internal/testenv"
)

// rawTar2ext4 writes tar2ext4's unrepaired output for tree.
func rawTar2ext4(t *testing.T, tree []byte) (*os.File, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "raw.ext4")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := tar2ext4.ConvertTarToExt4(bytes.NewReader(tree), f); err != nil {
		t.Fatal(err)
	}
	return f, p
}

func simpleTree(t *testing.T) []byte {
	return tarOf(t, dir("etc", 0o755), file("etc/hostname", 0o644, "cube\n"))
}

func TestInodeBitmapPaddingFixTar2ext4(t *testing.T) {
	f, p := rawTar2ext4(t, simpleTree(t))
	rc, out := fsck(t, p)
	if rc != 4 || !strings.Contains(out, "Padding at end of inode bitmap is not set") {
		t.Fatalf("raw tar2ext4 output: e2fsck exit %d, want 4 with the padding complaint:\n%s", rc, out)
	}
	im, err := readImage(f)
	if err != nil {
		t.Fatal(err)
	}
	n, err := fixInodeBitmapPadding(im)
	if err != nil {
		t.Fatal(err)
	}
	if n != int(im.groups) {
		t.Errorf("fixed %d groups, want %d", n, im.groups)
	}
	if rc, out := fsck(t, p); rc != 0 {
		t.Fatalf("after the fix: e2fsck exit %d:\n%s", rc, out)
	}
	if n, err := fixInodeBitmapPadding(im); err != nil || n != 0 {
		t.Errorf("second pass fixed %d groups (err %v), want 0", n, err)
	}
}

// The fix must also hold on images with metadata_csum, where e2fsck
// verifies bitmap and descriptor checksums: it must not disturb them.
func TestInodeBitmapPaddingFixMetadataCsum(t *testing.T) {
	mkfs := testenv.Tool(t, "mkfs.ext4")
	p := filepath.Join(t.TempDir(), "mkfs.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "4096", "-O", "metadata_csum,^resize_inode",
		"-E", "lazy_itable_init=0", p, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im, err := readImage(f)
	if err != nil {
		t.Fatal(err)
	}
	if !im.hasChecksums() {
		t.Fatal("mkfs.ext4 image has no checksums; the test needs metadata_csum")
	}
	ipg := int64(im.u32(sbInodesPerGroup))
	if ipg >= im.blockSize*8 {
		t.Skipf("inodes per group %d leaves no padding", ipg)
	}
	// Clear the padding of group 0 (always initialised: it holds the root).
	last := im.inodeBitmap(0)*im.blockSize + im.blockSize - 1
	if _, err := f.WriteAt([]byte{0}, last); err != nil {
		t.Fatal(err)
	}
	if rc, out := fsck(t, p); rc != 4 || !strings.Contains(out, "Padding at end of inode bitmap is not set") {
		t.Fatalf("damaged image: e2fsck exit %d, want 4 with the padding complaint:\n%s", rc, out)
	}
	if n, err := fixInodeBitmapPadding(im); err != nil || n != 1 {
		t.Fatalf("fixed %d groups (err %v), want 1", n, err)
	}
	if rc, out := fsck(t, p); rc != 0 {
		t.Fatalf("after the fix: e2fsck exit %d:\n%s", rc, out)
	}
}

// xattrBlockOrder lists "index:name" for the entries of the xattr block of
// the inode at path, read straight from the image.
func xattrBlockOrder(t *testing.T, f *os.File, img, path string) []string {
	t.Helper()
	var blk int64
	for _, line := range strings.Split(debugfs(t, img, "stat "+path), "\n") {
		if rest, ok := strings.CutPrefix(line, "File ACL: "); ok {
			if _, err := fmt.Sscan(rest, &blk); err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
		}
	}
	if blk == 0 {
		t.Fatalf("%s has no xattr block", path)
	}
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, blk*4096); err != nil {
		t.Fatal(err)
	}
	var names []string
	for pos := xattrHeaderSize; le.Uint32(buf[pos:]) != 0; pos += (16 + int(buf[pos]) + 3) &^ 3 {
		names = append(names, string(rune('0'+buf[pos+1]))+":"+string(buf[pos+16:pos+16+int(buf[pos])]))
	}
	return names
}

func TestXattrBlockSorted(t *testing.T) {
	// Values too big for the inode put every entry in the block. tar2ext4's
	// comparator is not a strict order and moves system.a (index 7) ahead
	// of security.zz (index 6); kernels that stop at the first greater
	// entry then miss security.zz.
	tree := tarOf(t, entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, PAXRecords: map[string]string{
		"SCHILY.xattr.security.zz": strings.Repeat("q", 100),
		"SCHILY.xattr.system.a":    strings.Repeat("r", 100),
		"SCHILY.xattr.user.bb":     strings.Repeat("s", 100),
		"SCHILY.xattr.user.c":      strings.Repeat("t", 100),
	}}})
	f, p := rawTar2ext4(t, tree)
	want := []string{"1:c", "1:bb", "6:zz", "7:a"}
	before := xattrBlockOrder(t, f, p, "f")
	t.Logf("tar2ext4 order: %v", before)
	if strings.Join(before, " ") == strings.Join(want, " ") {
		t.Logf("tar2ext4 already wrote kernel order %v", before)
	}
	im, err := readImage(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, n, err := fixInodes(im, buildTime); err != nil || n != 1 {
		t.Fatalf("fixInodes changed %d xattr blocks (err %v), want 1", n, err)
	}
	if got := xattrBlockOrder(t, f, p, "f"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after the fix: %v, want %v (before: %v)", got, want, before)
	}
	if _, err := fixInodeBitmapPadding(im); err != nil {
		t.Fatal(err)
	}
	if rc, out := fsck(t, p); rc != 0 {
		t.Fatalf("e2fsck exit %d:\n%s", rc, out)
	}
	mustContain(t, "f", debugfs(t, p, "stat f"), "security.zz (100)", "system.a (100)", "user.bb (100)", "user.c (100)")
}

func TestGrowToAlignment(t *testing.T) {
	f, p := rawTar2ext4(t, simpleTree(t))
	im, err := readImage(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.checkTar2ext4Shape(); err != nil {
		t.Fatal(err)
	}
	before := im.blocksCount()
	if _, err := fixInodeBitmapPadding(im); err != nil {
		t.Fatal(err)
	}
	added, err := growTo(im, Alignment/blockSize, f.Truncate)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.flush(); err != nil {
		t.Fatal(err)
	}
	if im.blocksCount() != before+added || im.blocksCount()%(Alignment/blockSize) != 0 {
		t.Errorf("blocks %d -> %d (+%d): want a multiple of %d", before, im.blocksCount(), added, Alignment/blockSize)
	}
	st, _ := f.Stat()
	if st.Size() != im.blocksCount()*blockSize {
		t.Errorf("file is %d bytes, fs is %d blocks", st.Size(), im.blocksCount())
	}
	if rc, out := fsck(t, p); rc != 0 {
		t.Fatalf("e2fsck exit %d:\n%s", rc, out)
	}
	mustContain(t, "stats", debugfs(t, p, "stats"), "Free blocks:              "+strconv.FormatInt(added, 10))
}
