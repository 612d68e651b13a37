package harness

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// socketOwner finds which of pids holds the client end of a loopback TCP
// connection whose peer (as the server sees it) is remote and whose server
// end is local. It reads /proc/net/tcp for the client socket's inode and
// then the candidates' /proc/PID/fd links. 0 means not found.
func socketOwner(remote, local net.Addr, pids []int) int {
	ra, ok1 := remote.(*net.TCPAddr)
	la, ok2 := local.(*net.TCPAddr)
	if !ok1 || !ok2 || len(pids) == 0 {
		return 0
	}
	inode := clientInode(ra.Port, la.Port)
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return pid
			}
		}
	}
	return 0
}

// clientInode is the inode of the socket whose local port is cport and
// remote port sport.
func clientInode(cport, sport int) string {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[0] == "sl" {
				continue
			}
			if hexPort(fs[1]) == cport && hexPort(fs[2]) == sport {
				fh.Close()
				return fs[9]
			}
		}
		fh.Close()
	}
	return ""
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseUint(addr[i+1:], 16, 32)
	if err != nil {
		return -1
	}
	return int(n)
}
