package tcapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
)

// compatEnv is a SQLite store holding three templates: tpl-ok (two nodes on
// the manifest's versions), tpl-old (one node on an old kernel) and
// tpl-blank (a node that reported nothing).
func compatEnv(t *testing.T) (*entstore.Store, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := entstore.Open(ctx, "sqlite://"+filepath.Join(dir, "tc.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tr := st.Templates()
	rep := func(tpl, node, kernel string) *core.Replica {
		r := &core.Replica{TemplateID: tpl, NodeID: node, Status: core.ReplicaReady, Phase: core.ReplicaPhaseReady, KernelVersion: kernel}
		if kernel != "" {
			r.GuestImageVersion, r.AgentVersion = "g1", "a1"
		}
		return r
	}
	for _, tpl := range []string{"tpl-ok", "tpl-old", "tpl-blank"} {
		d := &core.Definition{TemplateID: tpl, InstanceType: core.DefaultInstanceType, Version: core.DefaultTemplateVersion, Status: core.TemplateReady}
		if err := tr.CreateDefinition(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*core.Replica{rep("tpl-ok", "n1", "k1"), rep("tpl-ok", "n2", "k1"), rep("tpl-old", "n1", "k0"), rep("tpl-blank", "n1", "")} {
		if err := tr.UpsertReplica(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return st, filepath.Join(dir, "release-manifest.json")
}

const compatToken = "compat-internal-token"

func compatCall(t *testing.T, h http.Handler, method string) (int, *tcapi.CompatReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, tcapi.PathCompat, nil)
	req.Header.Set(auth.Header, compatToken)
	h.ServeHTTP(rec, req)
	var body struct {
		Ret struct {
			Code int `json:"ret_code"`
		} `json:"ret"`
		Data *tcapi.CompatReport `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %v: %s", method, err, rec.Body)
	}
	return body.Ret.Code, body.Data
}

func statuses(rep *tcapi.CompatReport) map[string]string {
	out := map[string]string{}
	for _, tc := range rep.Templates {
		out[tc.TemplateID] = tc.Status
	}
	return out
}

func TestCompatRoutes(t *testing.T) {
	st, manifest := compatEnv(t)
	clock := time.Unix(1_800_000_000, 0)
	h := tcapi.New(tcapi.Config{Token: compatToken, Compat: &data.CompatScanner{Templates: st.Templates(), Manifests: hostfiles.ManifestFile{Path: manifest},
		Clock: fixedClock(clock), ManifestSource: manifest}})
	allUnknown := map[string]string{"tpl-ok": "UNKNOWN", "tpl-old": "UNKNOWN", "tpl-blank": "UNKNOWN"}

	// No manifest: not an error, everything UNKNOWN.
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		code, rep := compatCall(t, h, m)
		if code != 200 || rep == nil || rep.ManifestFound || rep.ManifestPath != manifest {
			t.Fatalf("%s without manifest: code %d, report %+v", m, code, rep)
		}
		if got := statuses(rep); !maps.Equal(got, allUnknown) {
			t.Fatalf("%s without manifest: statuses %v", m, got)
		}
	}

	// With a manifest, GET still shows the stored verdicts (the rescan
	// above stored UNKNOWN); POST recomputes and stores.
	if err := os.WriteFile(manifest, []byte(`{"version":"1.4","components":{"guest_image":"g1","agent":"a1","kernel":"k1","shim":"s1"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, rep := compatCall(t, h, http.MethodGet)
	if code != 200 || !rep.ManifestFound || rep.Declared["kernel"] != "k1" || !maps.Equal(statuses(rep), allUnknown) {
		t.Fatalf("GET before rescan: code %d, report %+v", code, rep)
	}
	code, rep = compatCall(t, h, http.MethodPost)
	want := map[string]string{"tpl-ok": "COMPATIBLE", "tpl-old": "INCOMPATIBLE", "tpl-blank": "UNKNOWN"}
	if code != 200 || !maps.Equal(statuses(rep), want) {
		t.Fatalf("POST: code %d, statuses %v", code, statuses(rep))
	}
	if !rep.CheckedAt.Equal(clock) {
		t.Fatalf("checked_at %v, want %v", rep.CheckedAt, clock)
	}
	for _, tc := range rep.Templates {
		switch tc.TemplateID {
		case "tpl-ok":
			if tc.Components["kernel"] != "k1" || len(tc.Replicas) != 2 || tc.Replicas[1].Status != "COMPATIBLE" {
				t.Fatalf("tpl-ok entry %+v", tc)
			}
		case "tpl-old":
			if len(tc.Reasons) != 1 || tc.Replicas[0].Components["kernel"] != "k0" {
				t.Fatalf("tpl-old entry %+v", tc)
			}
		}
	}

	// The verdicts were stored: GET now shows them, and so does the store.
	code, rep = compatCall(t, h, http.MethodGet)
	if code != 200 || !maps.Equal(statuses(rep), want) {
		t.Fatalf("GET after rescan: code %d, statuses %v", code, statuses(rep))
	}
	rs, err := st.Templates().ListReplicas(context.Background(), "tpl-old")
	if err != nil || len(rs) != 1 || rs[0].CompatStatus != core.CompatIncompatible || rs[0].CompatCheckedUnix != clock.Unix() {
		t.Fatalf("stored tpl-old replica %+v, %v", rs, err)
	}

	// A manifest that is there but broken is an error, not UNKNOWN.
	if err := os.WriteFile(manifest, []byte(`{"components":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := compatCall(t, h, http.MethodPost); code == 200 {
		t.Fatal("a broken manifest was accepted")
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
