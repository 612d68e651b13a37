package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// S3 operations the proxy tells apart.
const (
	S3Put      = "put"      // PutObject
	S3Create   = "create"   // CreateMultipartUpload
	S3Part     = "part"     // UploadPart
	S3Complete = "complete" // CompleteMultipartUpload
	S3Abort    = "abort"    // AbortMultipartUpload
	S3Get      = "get"
	S3Head     = "head"
	S3Delete   = "delete"
	S3List     = "list"
)

// S3 fault kinds.
const (
	// S3Fail answers Status with an S3 error body.
	S3Fail = "fail"
	// S3Stall holds the request until Release.
	S3Stall = "stall"
	// S3CorruptAfterAck lets the write through and then, before the client
	// sees the answer, overwrites the stored object with one byte flipped
	// (same size, same metadata): the server acknowledged bytes it does not
	// hold.
	S3CorruptAfterAck = "corrupt-after-ack"
)

// S3Rule is one fault of the S3 proxy.
type S3Rule struct {
	// Ops the rule applies to (S3Put, ...); empty means every write.
	Ops   []string
	Kind  string
	Times int // 0: every matching request
	// Status for S3Fail (500, 503).
	Status int
	// Chunks makes the rule apply to the chunk store's objects (under
	// _chunks/: chunks, indexes, the collector's state) too; without it
	// a rule meets the artifacts' own uploads only.
	Chunks bool
	hits   int
}

// isChunkKey reports whether key (with the cluster's prefix) is one of
// the chunk store's objects.
func isChunkKey(key string) bool {
	return strings.HasPrefix(key, "_chunks/") || strings.Contains(key, "/_chunks/")
}

// S3Request is one request the proxy saw.
type S3Request struct {
	At     time.Time
	Op     string
	Key    string
	Status int
	Fault  string
}

// S3Proxy sits between the data plane and the S3 server (MinIO). It keeps
// the client's Host header, so SigV4 signatures (and presigned URLs minted
// for the proxy's address) stay valid.
type S3Proxy struct {
	URL    string
	Bucket string
	rp     *httputil.ReverseProxy
	admin  *s3.Client

	faultState[S3Rule, S3Request]
}

// NewS3Proxy proxies to CUBE_TEST_S3_ENDPOINT; it closes with the test.
func NewS3Proxy(t testing.TB) *S3Proxy {
	t.Helper()
	endpoint := testenv.Get(t, testenv.S3Endpoint)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &S3Proxy{URL: "http://" + ln.Addr().String(), Bucket: testenv.Get(t, testenv.S3Bucket), faultState: newFaultState[S3Rule, S3Request](),
		admin: S3Client(t)}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { p.Release(); srv.Close() })
	return p
}

// S3Client is a client of the test S3 server itself (no proxy).
func S3Client(t testing.TB) *s3.Client {
	t.Helper()
	endpoint := testenv.Get(t, testenv.S3Endpoint)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(
		testenv.Get(t, testenv.S3AccessKey), testenv.Get(t, testenv.S3SecretKey), "")}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	})
}

// Add appends a rule.
func (p *S3Proxy) Add(r S3Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rr := r
	p.rules = append(p.rules, &rr)
}

// Count counts requests of op (with status 2xx if ok) for objects other
// than the chunk store's.
func (p *S3Proxy) Count(op string, ok bool) int {
	n := 0
	for _, r := range p.Requests() {
		if r.Op == op && (!ok || r.Status/100 == 2) && !isChunkKey(r.Key) {
			n++
		}
	}
	return n
}

// s3Op classifies a path-style request.
func (p *S3Proxy) s3Op(r *http.Request) (op, key string) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	_, key, _ = strings.Cut(path, "/")
	q := r.URL.Query()
	switch r.Method {
	case http.MethodPut:
		if q.Has("partNumber") {
			return S3Part, key
		}
		return S3Put, key
	case http.MethodPost:
		if q.Has("uploads") {
			return S3Create, key
		}
		if q.Has("uploadId") {
			return S3Complete, key
		}
		return "post", key
	case http.MethodDelete:
		if q.Has("uploadId") {
			return S3Abort, key
		}
		return S3Delete, key
	case http.MethodHead:
		return S3Head, key
	case http.MethodGet:
		if key == "" {
			return S3List, key
		}
		return S3Get, key
	}
	return strings.ToLower(r.Method), key
}

func isWrite(op string) bool {
	return op == S3Put || op == S3Create || op == S3Part || op == S3Complete
}

func (p *S3Proxy) match(op, key string) (S3Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ru := range p.rules {
		if !ru.Chunks && isChunkKey(key) {
			continue
		}
		if len(ru.Ops) == 0 && !isWrite(op) {
			continue
		}
		if len(ru.Ops) > 0 && !contains(ru.Ops, op) {
			continue
		}
		if ru.Times > 0 && ru.hits >= ru.Times {
			continue
		}
		ru.hits++
		return *ru, true
	}
	return S3Rule{}, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

type statusRecorder struct {
	http.ResponseWriter
	code int
	buf  *bytes.Buffer // holds the body when the answer must wait
}

func (s *statusRecorder) WriteHeader(c int) {
	s.code = c
	if s.buf == nil {
		s.ResponseWriter.WriteHeader(c)
	}
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	if s.buf != nil {
		return s.buf.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

func (p *S3Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, key := p.s3Op(r)
	rec := S3Request{At: time.Now(), Op: op, Key: key}
	rule, faulty := p.match(op, key)
	if faulty {
		rec.Fault = rule.Kind
	}
	defer func() {
		p.mu.Lock()
		p.reqs = append(p.reqs, rec)
		p.mu.Unlock()
	}()
	switch {
	case faulty && rule.Kind == S3Fail:
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(rule.Status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected %d</Message><Key>%s</Key></Error>`, rule.Status, key)
		rec.Status = rule.Status
		return
	case faulty && rule.Kind == S3Stall:
		p.mu.Lock()
		ch := p.release
		p.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			rec.Status = -1
			return
		}
	}
	sr := &statusRecorder{ResponseWriter: w}
	corrupt := faulty && rule.Kind == S3CorruptAfterAck && (op == S3Put || op == S3Complete)
	if corrupt {
		sr.buf = &bytes.Buffer{}
	}
	p.rp.ServeHTTP(sr, r)
	rec.Status = sr.code
	if corrupt {
		if sr.code/100 == 2 {
			if err := p.corrupt(r.Context(), key); err != nil {
				rec.Fault = "corrupt-failed: " + err.Error()
			}
		}
		w.WriteHeader(sr.code)
		w.Write(sr.buf.Bytes())
	}
}

// corrupt rewrites key with one byte flipped, keeping its size, content
// type and metadata.
func (p *S3Proxy) corrupt(ctx context.Context, key string) error {
	key, _ = url.PathUnescape(key)
	out, err := p.admin.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.Bucket, Key: &key})
	if err != nil {
		return err
	}
	b, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("empty object")
	}
	b[len(b)/2] ^= 0xff
	_, err = p.admin.PutObject(ctx, &s3.PutObjectInput{Bucket: &p.Bucket, Key: &key, Body: bytes.NewReader(b),
		ContentLength: aws.Int64(int64(len(b))), ContentType: out.ContentType, Metadata: out.Metadata})
	return err
}
