package adoption_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

const artifactID = "rfs-a1a1a1a1a1a1a1a1a1a1a1a1"

// TestAdoptUpstreamDatabase points this service at a database upstream's
// master created and filled: migrate adopts it (additions only), a second
// migrate does nothing, and the templates upstream made are then read,
// redone and deleted through the public API, with soft-deleted rows and
// snapshots invisible throughout.
//
// It runs on two upstream schemas per dialect: "newest" (the tables as
// upstream's newest migration chain leaves them, see the file's header)
// and "gorm" (an earlier one written from upstream's gorm models: other
// timestamp precision, the case-folded display_name_key). On both, no
// definition of an upstream column changes (type, nullability, default,
// generation) and no column upstream does not have comes back under an
// upstream name.
func TestAdoptUpstreamDatabase(t *testing.T) {
	for _, d := range []string{"mysql", "postgres"} {
		for _, schema := range []string{"newest", "gorm"} {
			t.Run(d+"/"+schema, func(t *testing.T) {
				t.Parallel()
				file := "testdata/schema/" + d + ".sql"
				if schema == "newest" {
					file = "testdata/schema/" + d + "-newest.sql"
				}
				adoptAndUse(t, d, file)
			})
		}
	}
}

func adoptAndUse(t *testing.T, d, schemaFile string) {
	ctx := context.Background()
	dsn, drop, err := testenv.Database(ctx, t, d, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop() })
	st, err := entstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	load(t, st.DB(), d, schemaFile)
	load(t, st.DB(), d, "testdata/rows.sql")
	before := columns(t, st.DB(), d)
	defsBefore := definitions(t, st.DB(), d)

	// The plan names the adoption and changes nothing.
	stmts, notes, err := migrations.Plan(ctx, st.DB(), d)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if len(stmts) == 0 || len(notes) == 0 || !strings.HasPrefix(notes[0], "adopting upstream's") {
		t.Fatalf("plan = %d statements, notes %q", len(stmts), notes)
	}
	if ok, _ := tableExists(st.DB(), d, migrations.Table); ok {
		t.Fatal("plan created the migration table")
	}
	for _, s := range stmts {
		if u := strings.ToUpper(s); strings.Contains(u, "DROP ") {
			t.Errorf("adoption plan drops something: %s", s)
		}
	}

	applied, err := st.Migrate(ctx)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if len(applied) != 1 || applied[0] != migrations.Adopted {
		t.Fatalf("migrate applied %v, want [%s]", applied, migrations.Adopted)
	}
	again, err := st.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second migrate = %v, %v; want nothing", again, err)
	}
	if stmts, _, err := migrations.Plan(ctx, st.DB(), d); err != nil || len(stmts) != 0 {
		t.Fatalf("plan after adoption = %q, %v", stmts, err)
	}
	// Nothing of theirs went away, none of their columns changed,
	// and no column they dropped came back.
	after := columns(t, st.DB(), d)
	for c := range before {
		if !after[c] {
			t.Errorf("column %s is gone", c)
		}
	}
	for c, def := range definitions(t, st.DB(), d) {
		if was, ok := defsBefore[c]; ok && was != def {
			t.Errorf("column %s changed:\n was %s\n now %s", c, was, def)
		}
	}
	if !before["t_cube_template_definition.retain"] && after["t_cube_template_definition.retain"] {
		t.Error("adoption added retain, which upstream dropped")
	}

	// Upstream's active jobs hold their templates' active keys
	// (invariant I1 holds from the start).
	if n := count(t, st.DB(), "SELECT COUNT(*) FROM t_cube_template_image_job WHERE active_key IS NOT NULL"); n != 2 {
		t.Errorf("%d jobs hold an active key, want 2 (tpl-pending's and tpl-running's)", n)
	}

	a := newAPI(t, st)
	if raw, code := a.do(t, http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-other", "template_id": "tpl-pending", "source_image_ref": "registry.example/other:1", "writable_layer_size": "20Gi",
	}); code != 130409 || !strings.Contains(string(raw), "job-pending-1") {
		t.Errorf("a second create of tpl-pending while upstream's job is active: %s; want 130409 naming job-pending-1", raw)
	}

	// Read: upstream's order and rows, minus soft-deleted ones and
	// snapshots.
	var list struct {
		Data []struct {
			TemplateID string `json:"template_id"`
			Status     string `json:"status"`
			Alias      string `json:"alias"`
		} `json:"data"`
	}
	a.call(t, http.MethodGet, "/cube/template", nil, &list)
	var ids []string
	for _, it := range list.Data {
		ids = append(ids, it.TemplateID)
	}
	if want := "tpl-web,tpl-failed,tpl-pending,tpl-running"; strings.Join(ids, ",") != want {
		t.Fatalf("templates = %v, want %s", ids, want)
	}
	if list.Data[0].Status != "READY" || list.Data[0].Alias != "web" {
		t.Errorf("tpl-web listed as %+v", list.Data[0])
	}
	var one struct {
		TemplateID string `json:"template_id"`
		Replicas   []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
		} `json:"replicas"`
	}
	a.call(t, http.MethodGet, "/cube/template?template_id=tpl-web", nil, &one)
	if len(one.Replicas) != 2 || one.Replicas[0].NodeID != "node-1" || one.Replicas[1].NodeID != "node-2" {
		t.Errorf("tpl-web replicas = %+v (the soft-deleted node-3 row must not show)", one.Replicas)
	}
	var res struct {
		TemplateID string `json:"template_id"`
	}
	a.call(t, http.MethodGet, "/cube/template/resolve?template=web", nil, &res)
	if res.TemplateID != "tpl-web" {
		t.Errorf("alias web resolves to %q", res.TemplateID)
	}
	if code := a.code(t, http.MethodGet, "/cube/template?template_id=tpl-gone", nil); code == 0 {
		t.Error("a soft-deleted template is found")
	}
	if code := a.code(t, http.MethodGet, "/cube/template?template_id=snap-1", nil); code == 0 {
		t.Error("an upstream snapshot is shown as a template")
	}

	// Redo: upstream's artifact is reused and sent to both nodes
	// with its own download token, and both snapshot again.
	var redo struct {
		Job struct {
			JobID string `json:"job_id"`
		} `json:"job"`
	}
	a.call(t, http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "req-redo-1", "template_id": "tpl-web"}, &redo)
	job := a.waitJob(t, st, redo.Job.JobID)
	if job.Status != core.JobReady || job.ArtifactID != artifactID || job.AttemptNo != 2 {
		t.Fatalf("redo job = %s %s attempt %d (%s), want READY on %s attempt 2", job.Status, job.ArtifactID, job.AttemptNo, job.ErrorMessage, artifactID)
	}
	created := a.created()
	if len(created) != 2 {
		t.Fatalf("CreateImage calls = %v, want node-1 and node-2", created)
	}
	for _, c := range created {
		if c.ArtifactID != artifactID || c.Token != "upstream-token" {
			t.Errorf("node artifact %+v: want %s with upstream's token", c, artifactID)
		}
	}
	if n := len(a.agent.AppSnapshotCalls()); n != 2 {
		t.Errorf("AppSnapshot calls = %d, want 2", n)
	}

	// Delete: the template and, as nothing else uses it, its
	// artifact are gone everywhere.
	a.call(t, http.MethodDelete, "/cube/template", map[string]any{"requestID": "req-del-1", "template_id": "tpl-web"}, nil)
	a.call(t, http.MethodDelete, "/cube/template", map[string]any{"requestID": "req-del-2", "template_id": "tpl-failed"}, nil)
	for _, q := range []string{
		"SELECT COUNT(*) FROM t_cube_template_definition WHERE template_id IN ('tpl-web', 'tpl-failed') AND deleted_at IS NULL",
		"SELECT COUNT(*) FROM t_cube_template_replica WHERE template_id = 'tpl-web' AND deleted_at IS NULL",
		"SELECT COUNT(*) FROM t_cube_template_image_job WHERE template_id IN ('tpl-web', 'tpl-failed') AND deleted_at IS NULL",
		"SELECT COUNT(*) FROM t_cube_rootfs_artifact WHERE artifact_id = '" + artifactID + "'",
		"SELECT COUNT(*) FROM t_cube_artifact_node_placement WHERE artifact_id = '" + artifactID + "'",
		"SELECT COUNT(*) FROM t_cube_template_name WHERE template_id IN ('tpl-web', 'tpl-failed')",
	} {
		if n := count(t, st.DB(), q); n != 0 {
			t.Errorf("%d rows left: %s", n, q)
		}
	}
	destroyed := a.destroyed()
	if !slices.Equal(destroyed, []string{"node-1/" + artifactID, "node-2/" + artifactID}) {
		t.Errorf("DestroyImage calls = %v, want the artifact on both nodes", destroyed)
	}
	// The snapshot and the soft-deleted rows are upstream's: left.
	if n := count(t, st.DB(), "SELECT COUNT(*) FROM t_cube_template_definition WHERE template_id IN ('snap-1', 'tpl-gone')"); n != 2 {
		t.Errorf("upstream's snapshot and soft-deleted rows: %d left, want 2", n)
	}
}

// api is the master's public API over the adopted store, with nodes and a
// data plane that record what they are asked.
type api struct {
	srv   *httptest.Server
	svc   *control.Service
	agent *portsmock.NodeAgentMock

	mu   sync.Mutex
	node map[string]core.NodeArtifact // by node id
}

type createdCopy struct {
	Node, ArtifactID, Token string
}

func newAPI(t *testing.T, st *entstore.Store) *api {
	a := &api{node: map[string]core.NodeArtifact{}}
	nodes := []ports.Node{
		{ID: "node-1", IP: "10.0.0.1", InstanceType: "cubebox", Addr: "node-1:9999", Healthy: true},
		{ID: "node-2", IP: "10.0.0.2", InstanceType: "cubebox", Addr: "node-2:9999", Healthy: true},
	}
	dir := &portsmock.NodeDirectoryMock{
		HealthyNodesFunc: func(context.Context, string) ([]ports.Node, error) { return nodes, nil },
		NodesFunc:        func(context.Context, string) ([]ports.Node, error) { return nodes, nil },
		DownFunc:         func(string) <-chan struct{} { return nil },
		GetFunc: func(_ context.Context, id string) (ports.Node, error) {
			for _, n := range nodes {
				if n.ID == id {
					return n, nil
				}
			}
			return ports.Node{}, fmt.Errorf("node %s: %w", id, core.ErrNotFound)
		},
	}
	a.agent = &portsmock.NodeAgentMock{
		CreateImageFunc: func(_ context.Context, n ports.Node, art core.NodeArtifact) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.node[n.ID] = art
			return nil
		},
		DestroyImageFunc: func(context.Context, ports.Node, string) error { return nil },
		AppSnapshotFunc: func(_ context.Context, n ports.Node, req *core.SandboxRequest, _ string) (ports.SnapshotResult, error) {
			tid := req.Annotations[core.AnnotationTemplateID]
			return ports.SnapshotResult{TemplateID: tid, SnapshotPath: "/data/snapshot/" + tid + "/" + n.ID}, nil
		},
		CleanupTemplateFunc: func(context.Context, ports.Node, string, string) error { return nil },
	}
	dp := &portsmock.DataPlaneMock{
		ArtifactExistsFunc: func(context.Context, *core.Artifact) (bool, error) { return true, nil },
		SubmitBuildFunc:    func(context.Context, ports.BuildRequest) error { return nil },
		DeleteArtifactFunc: func(ctx context.Context, aid string) error { return st.Artifacts().Delete(ctx, aid) },
		UploadArtifactFunc: func(context.Context, string, io.Reader, ports.ObjectInfo) (ports.StoredObject, error) {
			return ports.StoredObject{}, core.ErrUnsupported
		},
	}
	a.svc = &control.Service{
		Store: st, Locker: memlock.New(), Nodes: dir, Agent: a.agent, DataPlane: dp,
		IDs: system.IDs{}, Clock: system.Clock{}, Config: control.Config{DownloadBaseURL: "http://master:8089"},
	}
	r, err := cubeapi.New(cubeapi.Config{
		Token: "adoption-test-token", Reports: a.svc, Jobs: a.svc, Migrations: a.svc, Catalog: a.svc, Artifacts: a.svc,
		TemplateCenterURL: "http://127.0.0.1:1", DownloadBaseURL: "http://master:8089",
	})
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewServer(r)
	t.Cleanup(a.srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = a.svc.Wait(ctx)
	})
	return a
}

// call sends a request and decodes the answer into out, failing unless
// it is a success (ret_code 200).
func (a *api) call(t *testing.T, method, path string, body, out any) {
	t.Helper()
	raw, code := a.do(t, method, path, body)
	if code != 200 {
		t.Fatalf("%s %s: ret_code %d: %s", method, path, code, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

// code returns the answer's ret_code, 0 for a success.
func (a *api) code(t *testing.T, method, path string, body any) int {
	t.Helper()
	_, code := a.do(t, method, path, body)
	if code == 200 {
		return 0
	}
	return code
}

func (a *api) do(t *testing.T, method, path string, body any) ([]byte, int) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Ret struct {
			Code int `json:"ret_code"`
		} `json:"ret"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, raw, err)
	}
	return raw, env.Ret.Code
}

// waitJob waits for the background resume and returns the job.
func (a *api) waitJob(t *testing.T, st *entstore.Store, jobID string) *core.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.svc.Wait(ctx); err != nil {
		t.Fatalf("background work: %v", err)
	}
	j, err := st.Jobs().Get(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (a *api) created() []createdCopy {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []createdCopy
	for n, art := range a.node {
		out = append(out, createdCopy{Node: n, ArtifactID: art.ArtifactID, Token: art.Token})
	}
	slices.SortFunc(out, func(x, y createdCopy) int { return strings.Compare(x.Node, y.Node) })
	return out
}

func (a *api) destroyed() []string {
	var out []string
	for _, c := range a.agent.DestroyImageCalls() {
		out = append(out, c.Node.ID+"/"+c.Image)
	}
	slices.Sort(out)
	return out
}

// load runs a SQL file of one statement per line (comments skipped),
// with the placeholders of rows.sql filled for the dialect.
func load(t *testing.T, db *sql.DB, d, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	yes, no, now := "1", "0", "CURRENT_TIMESTAMP(3)"
	if d == "postgres" {
		yes, no, now = "true", "false", "now()"
	}
	r := strings.NewReplacer("__TRUE__", yes, "__FALSE__", no, "__NOW__", now)
	for _, stmt := range migrations.Statements(r.Replace(string(b))) {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v\n%s", file, err, stmt)
		}
	}
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func tableExists(db *sql.DB, d, table string) (bool, error) {
	q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	if d == "postgres" {
		q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
	}
	var n int
	err := db.QueryRow(q, table).Scan(&n)
	return n > 0, err
}

// columns lists every table.column of the database.
func columns(t *testing.T, db *sql.DB, d string) map[string]bool {
	t.Helper()
	q := "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE()"
	if d == "postgres" {
		q = "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
	}
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var tb, c string
		if err := rows.Scan(&tb, &c); err != nil {
			t.Fatal(err)
		}
		out[tb+"."+c] = true
	}
	return out
}

// definitions describes every column of the database as its definition:
// type (with length, precision), nullability, default and generation.
func definitions(t *testing.T, db *sql.DB, d string) map[string]string {
	t.Helper()
	q := "SELECT table_name, column_name, CONCAT_WS('|', column_type, is_nullable, IFNULL(column_default, '<none>'), " +
		"IFNULL(generation_expression, ''), extra) FROM information_schema.columns WHERE table_schema = DATABASE()"
	if d == "postgres" {
		q = "SELECT table_name, column_name, concat_ws('|', data_type, COALESCE(character_maximum_length, -1), COALESCE(datetime_precision, -1), " +
			"is_nullable, COALESCE(column_default, '<none>'), COALESCE(generation_expression, '')) FROM information_schema.columns WHERE table_schema = current_schema()"
	}
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var tb, c, def string
		if err := rows.Scan(&tb, &c, &def); err != nil {
			t.Fatal(err)
		}
		out[tb+"."+c] = def
	}
	return out
}
