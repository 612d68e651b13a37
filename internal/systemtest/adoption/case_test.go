package adoption_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// adopted is a database upstream's master created and filled, adopted by
// this service's migrate.
func adopted(t *testing.T, d string) *entstore.Store {
	t.Helper()
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
	load(t, st.DB(), d, "testdata/schema/"+d+".sql")
	load(t, st.DB(), d, "testdata/rows.sql")
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// TestAdoptedNamesCompareAsTheTemplateTables: upstream's MySQL tables are
// case-insensitive, so in an adopted database Web-App and web-app are one
// template id to the definition, job and replica tables. The name table
// (ids and aliases in one namespace) must compare the same way, or one
// name means two templates: here the alias web-app, given to tpl-web next
// to template Web-App, was resolved to tpl-web for sandboxes while GET and
// DELETE of web-app reached Web-App. Whatever the database, a name must
// mean one template on every path. (PostgreSQL compares byte for byte in
// every table.)
func TestAdoptedNamesCompareAsTheTemplateTables(t *testing.T) {
	for _, d := range []string{"mysql", "postgres"} {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			st := adopted(t, d)
			a := newAPI(t, st)
			readyTemplate(t, a, st, "Web-App")

			alias := "web-app"
			_, err := a.svc.SetAlias(ctx, "tpl-web", &alias)
			var taken *core.NameTakenError
			want := "tpl-web" // the alias was given
			switch {
			case errors.As(err, &taken) && taken.Holder == "Web-App":
				want = "Web-App" // refused: the name is Web-App's id
			case err != nil:
				t.Fatalf("SetAlias: %v", err)
			}
			byName, err := a.svc.ResolveTemplate(ctx, alias)
			if err != nil {
				t.Fatalf("resolve %s: %v", alias, err)
			}
			key, err := a.svc.ResolveTemplateKey(ctx, alias)
			if err != nil {
				t.Fatal(err)
			}
			byKey, err := a.svc.GetTemplate(ctx, key)
			if err != nil {
				t.Fatalf("get %s: %v", key, err)
			}
			if byName.TemplateID != want || byKey.TemplateID != want {
				t.Errorf("%q names %s for sandboxes and %s for GET/DELETE; want %s on both", alias, byName.TemplateID, byKey.TemplateID, want)
			}
		})
	}
}

// readyTemplate creates tid from an image and plays its build to READY.
func readyTemplate(t *testing.T, a *api, st *entstore.Store, tid string) {
	t.Helper()
	ctx := context.Background()
	req := &core.FromImageRequest{RequestID: "req-" + tid, SourceImageRef: "registry.example/app:2", TemplateID: tid, WritableLayerSize: "10Gi"}
	job, err := a.svc.CreateFromImage(ctx, req, "http://master:8089")
	if err != nil {
		t.Fatalf("create %s: %v", tid, err)
	}
	in := &core.BuildInputs{SourceImageDigest: "sha256:" + strings.Repeat("77", 32), BuilderFormat: core.BuilderFormatVersion, Builder: "adoption/1"}
	n, err := core.NormalizeFromImageRequest(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := core.FingerprintOf(n, *in)
	if err != nil {
		t.Fatal(err)
	}
	aid, _ := core.ArtifactIDFor(fp)
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.Fingerprint, u.SourceImageDigest, u.ArtifactStatus = aid, fp, in.SourceImageDigest, "READY"
	meta := &core.Artifact{ArtifactID: aid, Fingerprint: fp, SourceImageDigest: in.SourceImageDigest, DownloadBaseURL: "http://master:8089",
		Ext4SHA256: "5f5e5d5c5b5a595857565554535251504f4e4d4c4b4a49484746454443424140", Ext4SizeBytes: 1 << 20, ImageConfigJSON: "{}",
		StorageBackend: "file", ObjectKey: core.ArtifactObjectKey(aid)}
	if ok, err := a.svc.HandleStatusReport(ctx, job.JobID, ports.StatusReport{Update: u, Artifact: meta, Inputs: in}); err != nil || !ok {
		t.Fatalf("BUILT %s: %v %v", tid, ok, err)
	}
	if j := a.waitJob(t, st, job.JobID); j.Status != core.JobReady {
		t.Fatalf("%s: job %s %s", tid, j.Status, j.ErrorMessage)
	}
}
