package dataplanetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness serves a data plane the suite can observe and gives it a client.
type Harness interface {
	// MakeDataPlane returns the DataPlane under test, talking to the
	// harness's data plane.
	MakeDataPlane(ctx context.Context) (ports.DataPlane, error)
	// SetBuildCapacity makes the data plane take at most n builds at once
	// (n may be 0). Builds it takes stay in flight until the harness
	// closes. Before the first call the capacity is unlimited.
	SetBuildCapacity(n int)
	// Builds returns the build requests the data plane took, in order.
	Builds() []ports.BuildRequest
	// Requests counts the requests that reached the data plane so far.
	Requests() int
	// SeedArtifact creates the data plane's artifact row a and, when data is
	// not nil, stores data as its bytes (where core.ObjectKeyOf(a) says).
	SeedArtifact(ctx context.Context, a *core.Artifact, data []byte) error
	// Artifact returns the data plane's artifact row; an error wrapping
	// core.ErrNotFound when there is none.
	Artifact(ctx context.Context, artifactID string) (*core.Artifact, error)
	// Stored returns the bytes the data plane's store holds for the
	// artifact and where, or nil when it holds none.
	Stored(ctx context.Context, artifactID string) (*StoredCopy, error)
	// Secrets returns the credentials the client was given (its token);
	// no error may contain one.
	Secrets() []string
	// Close releases what the harness opened.
	Close()
}

// StoredCopy is an artifact's bytes in the data plane's store.
type StoredCopy struct {
	Object ports.StoredObject
	Data   []byte
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest so a client that never returns fails
// instead of hanging the run.
const testTimeout = 60 * time.Second

type env struct {
	ctx     context.Context
	h       Harness
	dp      ports.DataPlane
	run     string   // random part of ids, so subtests never collide
	secrets []string // must never appear in an error
}

// RunConformanceTests runs the suite against the DataPlane newHarness
// builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"SubmitBuildAccepted", testSubmitAccepted},
		{"SubmitBuildBusyAtCapacity", testSubmitBusy},
		{"SubmitBuildConflictInFlight", testSubmitConflict},
		{"InvalidIDsRefusedBeforeAnyRequest", testInvalidIDs},
		{"DeleteArtifactIsIdempotent", testDelete},
		{"ArtifactExistsAsksTheDataPlane", testExists},
		{"ArtifactExistsErrorIsNotAbsent", testExistsError},
		{"ArtifactExistsPresentWithoutAsking", testExistsWithoutAsking},
		{"ArtifactExistsWithoutTokenIsAnError", testExistsWithoutToken},
		{"UploadArtifactStoresVerifiedBytes", testUpload},
		{"UploadArtifactRefusesMismatches", testUploadMismatch},
		{"UploadArtifactNeverReplaces", testUploadNeverReplaces},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			dp, err := h.MakeDataPlane(ctx)
			if err != nil {
				t.Fatalf("MakeDataPlane: %v", err)
			}
			e := &env{ctx: ctx, h: h, dp: dp, run: randomHex(4)}
			for _, s := range h.Secrets() {
				if s != "" {
					e.secrets = append(e.secrets, s)
				}
			}
			tc.fn(t, e)
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// id returns an id unique to the subtest.
func (e *env) id(prefix string) string { return prefix + "-" + e.run + "-" + randomHex(4) }

// checkSecrets fails the test if err's text contains a secret: the
// harness's, or one the subtest put in the request.
func (e *env) checkSecrets(t *testing.T, err error, more ...string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range append(append([]string(nil), e.secrets...), more...) {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("error %q contains a secret", msg)
		}
	}
}

// wantErrIs checks that err wraps want and none of the other sentinels a
// caller branches on.
func wantErrIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want an error wrapping %v", what, err, want)
	}
	for _, other := range []error{core.ErrBusy, core.ErrConflict, core.ErrNotFound, core.ErrInvalidArgument} {
		if other != want && errors.Is(err, other) {
			t.Errorf("%s = %v: wraps %v as well as %v", what, err, other, want)
		}
	}
}

// buildRequest is a complete request, with a registry password that must
// never show up in an error.
func (e *env) buildRequest(withEnvd bool) ports.BuildRequest {
	req := ports.BuildRequest{
		JobID: e.id("job"),
		Request: &core.FromImageRequest{
			RequestID:         "req-" + e.run,
			SourceImageRef:    "registry.example/team/app:1.2",
			RegistryUsername:  "robot",
			RegistryPassword:  "registry-password-" + randomHex(8),
			TemplateID:        e.id("tpl"),
			InstanceType:      "cubebox",
			NetworkType:       "tap",
			WritableLayerSize: "20Gi",
			ExposedPorts:      []int32{80, 8080},
			DistributionScope: []string{"node-a", "node-b"},
			Platform:          "linux/arm64",
		},
		DownloadBaseURL: "http://master.example:8089",
	}
	if withEnvd {
		req.EnvdData = append([]byte("\x7fELF envd "), randomBytes(2048)...)
		req.EnvdSHA256 = sha(req.EnvdData)
	}
	return req
}

func (e *env) submit(t *testing.T, req ports.BuildRequest) error {
	t.Helper()
	err := e.dp.SubmitBuild(e.ctx, req)
	e.checkSecrets(t, err, req.Request.RegistryPassword)
	return err
}

func (e *env) wantBuilds(t *testing.T, want ...ports.BuildRequest) {
	t.Helper()
	got := e.h.Builds()
	if len(got) != len(want) {
		t.Fatalf("data plane took %d builds, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("build %d arrived as\n%+v (request %+v)\nwant\n%+v (request %+v)", i, got[i], got[i].Request, want[i], want[i].Request)
		}
	}
}

func testSubmitAccepted(t *testing.T, e *env) {
	var sent []ports.BuildRequest
	for _, tc := range []struct {
		name     string
		withEnvd bool
	}{{"with envd", true}, {"without envd", false}} {
		t.Run(tc.name, func(t *testing.T) {
			req := e.buildRequest(tc.withEnvd)
			if err := e.submit(t, req); err != nil {
				t.Fatalf("SubmitBuild: %v", err)
			}
			sent = append(sent, req)
			e.wantBuilds(t, sent...)
		})
	}
}

func testSubmitBusy(t *testing.T, e *env) {
	e.h.SetBuildCapacity(0)
	first := e.buildRequest(false)
	wantErrIs(t, "SubmitBuild at capacity 0", e.submit(t, first), core.ErrBusy)
	e.wantBuilds(t)

	e.h.SetBuildCapacity(1)
	if err := e.submit(t, first); err != nil {
		t.Fatalf("SubmitBuild with room: %v", err)
	}
	second := e.buildRequest(true)
	wantErrIs(t, "SubmitBuild at capacity", e.submit(t, second), core.ErrBusy)
	// A refused build can be submitted again once there is room.
	e.h.SetBuildCapacity(2)
	if err := e.submit(t, second); err != nil {
		t.Fatalf("SubmitBuild after the capacity grew: %v", err)
	}
	e.wantBuilds(t, first, second)
}

func testSubmitConflict(t *testing.T, e *env) {
	req := e.buildRequest(true)
	if err := e.submit(t, req); err != nil {
		t.Fatalf("SubmitBuild: %v", err)
	}
	wantErrIs(t, "SubmitBuild of a job in flight", e.submit(t, req), core.ErrConflict)
	// In flight wins over busy: the build exists, it is not merely refused.
	e.h.SetBuildCapacity(1)
	wantErrIs(t, "SubmitBuild of a job in flight at capacity", e.submit(t, req), core.ErrConflict)
	e.wantBuilds(t, req)
}

var invalidIDs = []struct{ name, id string }{
	{"empty", ""},
	{"slash", "a/b"},
	{"dot-dot", ".."},
	{"path escape", "../../etc/passwd"},
	{"space", "job 1"},
	{"query", "job?x=1"},
	{"newline", "job\n1"},
	{"leading dash", "-job"},
	{"too long", strings.Repeat("j", 129)},
}

func testInvalidIDs(t *testing.T, e *env) {
	for _, tc := range invalidIDs {
		t.Run(tc.name, func(t *testing.T) {
			before := e.h.Requests()
			req := e.buildRequest(false)
			req.JobID = tc.id
			wantErrIs(t, "SubmitBuild", e.submit(t, req), core.ErrInvalidArgument)
			err := e.dp.DeleteArtifact(e.ctx, tc.id)
			e.checkSecrets(t, err)
			wantErrIs(t, "DeleteArtifact", err, core.ErrInvalidArgument)
			data := []byte("ext4")
			_, err = e.dp.UploadArtifact(e.ctx, tc.id, bytes.NewReader(data), ports.ObjectInfo{Size: 4, SHA256: sha(data)})
			e.checkSecrets(t, err)
			wantErrIs(t, "UploadArtifact", err, core.ErrInvalidArgument)
			if n := e.h.Requests() - before; n != 0 {
				t.Errorf("%d requests reached the data plane for id %q", n, tc.id)
			}
		})
	}
	e.wantBuilds(t)
}

// artifact returns a READY artifact row with a download token and unique
// fingerprint.
func (e *env) artifact(data []byte) *core.Artifact {
	aid := e.id("rfs")
	a := &core.Artifact{
		ArtifactID: aid, Fingerprint: randomHex(32), SourceImageRef: "registry.example/team/app:1.2",
		DownloadBaseURL: "http://master.example:8089", Ext4Path: "/legacy/" + aid + "/" + aid + ".ext4",
		DownloadToken: "download-token-" + randomHex(8), Status: core.ArtifactReady, StorageBackend: "s3",
	}
	if data != nil {
		a.Ext4SHA256, a.Ext4SizeBytes = sha(data), int64(len(data))
	}
	return a
}

func (e *env) seed(t *testing.T, a *core.Artifact, data []byte) {
	t.Helper()
	if err := e.h.SeedArtifact(e.ctx, a, data); err != nil {
		t.Fatalf("SeedArtifact(%s): %v", a.ArtifactID, err)
	}
}

func (e *env) stored(t *testing.T, aid string) *StoredCopy {
	t.Helper()
	c, err := e.h.Stored(e.ctx, aid)
	if err != nil {
		t.Fatalf("Stored(%s): %v", aid, err)
	}
	return c
}

func (e *env) exists(t *testing.T, a *core.Artifact) (bool, error) {
	t.Helper()
	ok, err := e.dp.ArtifactExists(e.ctx, a)
	e.checkSecrets(t, err, a.DownloadToken)
	return ok, err
}

func testDelete(t *testing.T, e *env) {
	data := randomBytes(4096)
	a := e.artifact(data)
	a.Status = core.ArtifactCleanupPending
	e.seed(t, a, data)
	if e.stored(t, a.ArtifactID) == nil {
		t.Fatal("harness: seeded bytes are not stored")
	}
	for i := range 2 {
		if err := e.dp.DeleteArtifact(e.ctx, a.ArtifactID); err != nil {
			e.checkSecrets(t, err)
			t.Fatalf("DeleteArtifact #%d: %v", i+1, err)
		}
		if c := e.stored(t, a.ArtifactID); c != nil {
			t.Fatalf("after DeleteArtifact #%d the store still holds %d bytes", i+1, len(c.Data))
		}
		if row, err := e.h.Artifact(e.ctx, a.ArtifactID); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("after DeleteArtifact #%d the row is %+v, %v; want it gone", i+1, row, err)
		}
	}
	// An artifact the data plane never had.
	if err := e.dp.DeleteArtifact(e.ctx, e.id("rfs-never")); err != nil {
		e.checkSecrets(t, err)
		t.Fatalf("DeleteArtifact of an unknown artifact: %v", err)
	}
	// Nodes now find nothing either.
	ready := *a
	ready.Status = core.ArtifactReady
	if ok, err := e.exists(t, &ready); err != nil || ok {
		t.Fatalf("ArtifactExists after delete = %v, %v; want false, nil", ok, err)
	}
}

func testExists(t *testing.T, e *env) {
	data := randomBytes(1000)
	present := e.artifact(data)
	e.seed(t, present, data)
	noBytes := e.artifact(data)
	e.seed(t, noBytes, nil)
	unknown := e.artifact(data) // never seeded

	for _, tc := range []struct {
		name string
		a    *core.Artifact
		want bool
	}{
		{"bytes served", present, true},
		{"row without bytes", noBytes, false},
		{"no row", unknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.h.Requests()
			ok, err := e.exists(t, tc.a)
			if err != nil || ok != tc.want {
				t.Fatalf("ArtifactExists = %v, %v; want %v, nil", ok, err, tc.want)
			}
			if e.h.Requests() == before {
				t.Error("ArtifactExists answered without asking the data plane")
			}
		})
	}
}

func testExistsError(t *testing.T, e *env) {
	data := randomBytes(1000)
	a := e.artifact(data)
	e.seed(t, a, data)
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"wrong token", "download-token-" + randomHex(8)},
		{"token of another case", strings.ToUpper(a.DownloadToken)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := *a
			asked.DownloadToken = tc.token
			ok, err := e.exists(t, &asked)
			if err == nil {
				t.Fatalf("ArtifactExists with a refused token = %v, nil; want an error, not a guess", ok)
			}
			if ok {
				t.Errorf("ArtifactExists returned true with its error %v", err)
			}
			e.checkSecrets(t, err, a.DownloadToken)
		})
	}
	// The right token still works: the refusals changed nothing.
	if ok, err := e.exists(t, a); err != nil || !ok {
		t.Fatalf("ArtifactExists with the right token = %v, %v; want true, nil", ok, err)
	}
}

func testExistsWithoutAsking(t *testing.T, e *env) {
	for _, st := range []core.ArtifactStatus{core.ArtifactPending, core.ArtifactBuilding, core.ArtifactFailed,
		core.ArtifactCleanupPending, core.ArtifactDeleting} {
		t.Run(string(st), func(t *testing.T) {
			// The data plane has no such artifact: asking would say absent.
			a := e.artifact(randomBytes(10))
			a.Status = st
			before := e.h.Requests()
			ok, err := e.exists(t, a)
			if err != nil || !ok {
				t.Fatalf("ArtifactExists = %v, %v; want true, nil", ok, err)
			}
			if n := e.h.Requests() - before; n != 0 {
				t.Errorf("ArtifactExists made %d requests for a row it cannot ask about", n)
			}
		})
	}
}

// testExistsWithoutToken: a READY row without a download token cannot be
// asked the way nodes download it, whether or not its bytes are there, and
// the answer is an error rather than a guess ("present" would let a caller
// reuse bytes that are gone).
func testExistsWithoutToken(t *testing.T, e *env) {
	data := randomBytes(1000)
	stored := e.artifact(data)
	e.seed(t, stored, data)
	for _, tc := range []struct {
		name string
		a    *core.Artifact
	}{
		{"bytes served", stored},
		{"no row", e.artifact(data)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := *tc.a
			a.DownloadToken = ""
			before := e.h.Requests()
			ok, err := e.exists(t, &a)
			wantErrIs(t, "ArtifactExists without a token", err, core.ErrInvalidArgument)
			if ok {
				t.Errorf("ArtifactExists without a token returned true with its error %v", err)
			}
			if n := e.h.Requests() - before; n != 0 {
				t.Errorf("ArtifactExists made %d requests for a row it cannot ask about", n)
			}
		})
	}
}

func (e *env) upload(t *testing.T, aid string, body []byte, info ports.ObjectInfo) (ports.StoredObject, error) {
	t.Helper()
	obj, err := e.dp.UploadArtifact(e.ctx, aid, bytes.NewReader(body), info)
	e.checkSecrets(t, err)
	return obj, err
}

// wantStored checks that the store holds data for aid, where obj says.
func (e *env) wantStored(t *testing.T, aid string, obj ports.StoredObject, data []byte) {
	t.Helper()
	c := e.stored(t, aid)
	switch {
	case c == nil:
		t.Fatalf("the data plane's store holds nothing for %s", aid)
	case !bytes.Equal(c.Data, data):
		t.Fatalf("the store holds %d bytes for %s that differ from the %d uploaded", len(c.Data), aid, len(data))
	case c.Object != obj:
		t.Fatalf("UploadArtifact returned %+v, the bytes are at %+v", obj, c.Object)
	}
}

func (e *env) wantNothingStored(t *testing.T, aid string) {
	t.Helper()
	if c := e.stored(t, aid); c != nil {
		t.Fatalf("the store holds %d bytes for %s after a refused upload", len(c.Data), aid)
	}
}

func testUpload(t *testing.T, e *env) {
	for _, tc := range []struct {
		name    string
		size    int
		records bool // the row already records sha256 and size
	}{
		{"row records checksum", 64 << 10, true},
		{"row records nothing", 3000, false},
		{"one byte", 1, true},
		{"several MiB", 5<<20 + 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size)
			a := e.artifact(data)
			if !tc.records {
				a.Ext4SHA256, a.Ext4SizeBytes = "", 0
			}
			e.seed(t, a, nil)
			info := infoOf(data)
			obj, err := e.upload(t, a.ArtifactID, data, info)
			if err != nil {
				t.Fatalf("UploadArtifact: %v", err)
			}
			if obj.ObjectKey == "" || obj.StorageBackend == "" {
				t.Fatalf("UploadArtifact returned %+v; want the object key and backend", obj)
			}
			e.wantStored(t, a.ArtifactID, obj, data)

			// The same bytes again: done, same place.
			again, err := e.upload(t, a.ArtifactID, data, info)
			if err != nil {
				t.Fatalf("second identical UploadArtifact: %v", err)
			}
			if again != obj {
				t.Fatalf("second identical UploadArtifact returned %+v, the first %+v", again, obj)
			}
			e.wantStored(t, a.ArtifactID, obj, data)
		})
	}
}

// wantMismatch checks an upload error: it wraps core.ErrInvalidArgument or
// core.ErrConflict.
func wantMismatch(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("UploadArtifact of mismatching bytes succeeded")
	}
	if !errors.Is(err, core.ErrInvalidArgument) && !errors.Is(err, core.ErrConflict) {
		t.Fatalf("UploadArtifact = %v, want an error wrapping core.ErrInvalidArgument or core.ErrConflict", err)
	}
}

// upload is a body and what is declared about it.
type upload struct {
	body []byte
	info ports.ObjectInfo
}

func infoOf(b []byte) ports.ObjectInfo { return ports.ObjectInfo{Size: int64(len(b)), SHA256: sha(b)} }

func flipped(b []byte) []byte {
	c := bytes.Clone(b)
	c[len(c)/2] ^= 1
	return c
}

func longer(b []byte) []byte { return append(bytes.Clone(b), 'x') }

func testUploadMismatch(t *testing.T, e *env) {
	for _, tc := range []struct {
		name    string
		records bool // the row records data's sha256 and size
		make    func(data []byte) upload
	}{
		{"wrong sha256", false, func(d []byte) upload {
			return upload{d, ports.ObjectInfo{Size: int64(len(d)), SHA256: sha([]byte("other"))}}
		}},
		{"one bit flipped", false, func(d []byte) upload { return upload{flipped(d), infoOf(d)} }},
		{"body shorter than size", false, func(d []byte) upload { return upload{d[:len(d)-1], infoOf(d)} }},
		{"body half the size", true, func(d []byte) upload { return upload{d[:len(d)/2], infoOf(d)} }},
		{"body longer than size", false, func(d []byte) upload { return upload{longer(d), infoOf(d)} }},
		{"empty body", false, func(d []byte) upload { return upload{nil, infoOf(d)} }},
		{"other bytes than the row records", true, func(d []byte) upload { return upload{flipped(d), infoOf(flipped(d))} }},
		{"more bytes than the row records", true, func(d []byte) upload { return upload{longer(d), infoOf(longer(d))} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(256 << 10)
			a := e.artifact(data)
			if !tc.records {
				a.Ext4SHA256, a.Ext4SizeBytes = "", 0
			}
			e.seed(t, a, nil)
			up := tc.make(data)
			_, err := e.upload(t, a.ArtifactID, up.body, up.info)
			wantMismatch(t, err)
			e.wantNothingStored(t, a.ArtifactID)
			// Nothing half-written blocks the right upload afterwards.
			obj, err := e.upload(t, a.ArtifactID, data, infoOf(data))
			if err != nil {
				t.Fatalf("UploadArtifact of the right bytes after a refused one: %v", err)
			}
			e.wantStored(t, a.ArtifactID, obj, data)
		})
	}
}

func testUploadNeverReplaces(t *testing.T, e *env) {
	data := randomBytes(10 << 10)
	a := e.artifact(data)
	a.Ext4SHA256, a.Ext4SizeBytes = "", 0 // the first upload decides
	e.seed(t, a, nil)
	obj, err := e.upload(t, a.ArtifactID, data, infoOf(data))
	if err != nil {
		t.Fatalf("UploadArtifact: %v", err)
	}
	for _, other := range [][]byte{flipped(data), longer(data), data[:len(data)-1]} {
		_, err := e.upload(t, a.ArtifactID, other, infoOf(other))
		wantMismatch(t, err)
		// Nodes may hold and verify the first bytes: they stay.
		e.wantStored(t, a.ArtifactID, obj, data)
	}
}
