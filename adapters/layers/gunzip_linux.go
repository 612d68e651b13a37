package layers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const gzipProgramSupported = true

// nobody is the unprivileged user a root process runs the decoder as.
const nobody = 65534

// open starts the program on src. An *os.File is handed to the child as
// its stdin; anything else is copied in by a goroutine, so that a failure
// to read src (a download that broke) is reported as such rather than as
// a truncated stream.
func (p *GzipProgram) open(src io.Reader) (io.ReadCloser, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, &gzipHostError{err}
	}
	// Fewer, larger reads: the default 64 KiB pipe costs a context switch
	// per 64 KiB of a gigabyte.
	_, _ = unix.FcntlInt(outR.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	cmd := exec.Command(p.Path, "-d", "-c")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdout = outW
	d := &gzipProcess{cmd: cmd, out: outR, stderr: &stderrTail{}}
	cmd.Stderr = d.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	var inW *os.File
	if f, ok := src.(*os.File); ok {
		cmd.Stdin = f
	} else {
		var inR *os.File
		if inR, inW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			return nil, &gzipHostError{err}
		}
		cmd.Stdin = inR
		defer inR.Close()
	}
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		if inW != nil {
			inW.Close()
		}
		return nil, &gzipHostError{err}
	}
	outW.Close()
	if inW != nil {
		d.fed.Add(1)
		go func() {
			defer d.fed.Done()
			_, err := io.Copy(inW, src)
			inW.Close()
			// The child stopping early (EPIPE) is its own verdict, read
			// from its exit status; a source that failed is ours.
			if se := (*sourceError)(nil); errors.As(err, &se) {
				d.feedErr = err
			}
		}()
	}
	d.r = bufio.NewReaderSize(outR, 256<<10)
	return d, nil
}

// gzipProcess is the decoded stream of one running decoder.
type gzipProcess struct {
	cmd     *exec.Cmd
	out     *os.File
	r       *bufio.Reader
	stderr  *stderrTail
	fed     sync.WaitGroup
	feedErr error
	done    bool
	err     error // the stream's end: io.EOF or why it failed
}

func (*gzipProcess) feedsSource() {}

func (d *gzipProcess) Read(p []byte) (int, error) {
	if d.done {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	if err == io.EOF {
		d.err = d.finish()
		d.done = true
		return n, d.err
	}
	if err != nil {
		return n, &gzipHostError{err}
	}
	return n, nil
}

// finish waits for the child and the feeder once the output ended and
// says how the stream ended.
func (d *gzipProcess) finish() error {
	werr := d.cmd.Wait()
	d.out.Close()
	d.fed.Wait()
	if d.feedErr != nil {
		return d.feedErr
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return io.EOF
	case errors.As(werr, &ee) && ee.Exited():
		msg := string(bytes.TrimSpace(d.stderr.b))
		return fmt.Errorf("%w (exit status %d): %s", errGzipFailed, ee.ExitCode(), msg)
	}
	return &gzipHostError{werr}
}

// Close stops the child if the stream was not read to its end. It does
// not wait for the feeder, which may be blocked reading a download that
// only the caller's failure will cancel; the feeder ends with that read
// or with its next write, and nothing reads the source after Close.
func (d *gzipProcess) Close() error {
	if d.done {
		return nil
	}
	d.done, d.err = true, io.ErrClosedPipe
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d.out.Close()
	return nil
}
