package masterapp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
	"github.com/cubesandbox/templatecenter/adapters/lock/pglock"
	"github.com/cubesandbox/templatecenter/adapters/nodedir"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func testWiring(t *testing.T, dsn string) wiring {
	cfg := config.Defaults()
	cfg.Master.DBDSN = dsn
	cfg.CallbackToken = "t"
	return wiring{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tcBase: "http://127.0.0.1:1", downloadBase: "http://127.0.0.1:2"}
}

// TestInjectorPicksLockerByDialect opens each real database (no schema
// changes) and checks the cross-process lock that comes with it.
func TestInjectorPicksLockerByDialect(t *testing.T) {
	cases := []struct {
		name string
		dsn  func(t *testing.T) string
		want func(ports.Locker) bool
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "m.db") },
			func(l ports.Locker) bool { _, ok := l.(*memlock.Locker); return ok }},
		{"mysql", func(t *testing.T) string { return testenv.Get(t, testenv.MySQLDSN) },
			func(l ports.Locker) bool { _, ok := l.(*mysqllock.Locker); return ok }},
		{"postgres", func(t *testing.T) string { return testenv.Get(t, testenv.PostgresDSN) },
			func(l ports.Locker) bool { _, ok := l.(*pglock.Locker); return ok }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			i := newInjector(testWiring(t, tc.dsn(t)))
			defer i.Shutdown()
			st := do.MustInvoke[*entstore.Store](i)
			defer st.Close()
			l := do.MustInvoke[ports.Locker](i)
			if u, ok := l.(interface{ Unwrap() ports.Locker }); ok {
				l = u.Unwrap() // the adapter on its own pool
			}
			if !tc.want(l) {
				t.Fatalf("%s store got locker %T", st.Dialect(), l)
			}
		})
	}
}

// TestInjectorBuildsTheService resolves the whole graph on SQLite and
// checks the service's settings.
func TestInjectorBuildsTheService(t *testing.T) {
	w := testWiring(t, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	w.cfg.Master.EnvdHostDir = t.TempDir() // no envd binary in it
	i := newInjector(w)
	defer i.Shutdown()
	defer do.MustInvoke[*entstore.Store](i).Close()
	svc := do.MustInvoke[*control.Service](i)
	if svc.Config.DownloadBaseURL != w.downloadBase || svc.Envd != nil || svc.Legacy == nil {
		t.Fatalf("service config = %+v", svc.Config)
	}
	if svc.Store == nil || svc.Locker == nil || svc.Nodes == nil || svc.Agent == nil || svc.DataPlane == nil ||
		svc.IDs == nil || svc.Clock == nil || svc.Progress == nil {
		t.Fatalf("service has unset ports: %+v", svc)
	}
	if _, err := do.Invoke[http.Handler](i); err != nil {
		t.Fatal(err)
	}
}

// TestRedisProgressIsClosedAtShutdown uses the real Redis when configured.
func TestRedisProgressIsClosedAtShutdown(t *testing.T) {
	w := testWiring(t, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	w.cfg.RedisAddr = testenv.Get(t, testenv.RedisAddr)
	i := newInjector(w)
	sink := do.MustInvoke[ports.ProgressSink](i)
	if _, ok := sink.(redisSink); !ok {
		t.Fatalf("sink %T, want the Redis one", sink)
	}
	job := "cubemaster-wire-test-" + t.Name()
	if err := sink.Publish(t.Context(), job, ports.LiveProgress{Phase: core.PhasePulling, Progress: 12}); err != nil {
		t.Fatal(err)
	}
	if p, ok, err := sink.Get(t.Context(), job); err != nil || !ok || p.Progress != 12 {
		t.Fatalf("Get = %+v, %v, %v", p, ok, err)
	}
	if err := sink.Delete(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	if rep := i.Shutdown(); rep != nil && !rep.Succeed {
		t.Fatalf("shutdown: %v", rep)
	}
	if err := sink.Publish(t.Context(), job, ports.LiveProgress{}); err == nil {
		t.Fatal("the Redis client still works after shutdown")
	}
}

// TestDirectoryMergesNodeTable: the wired node directory lists the
// configured nodes plus the node table's rows, and a disabled row takes a
// configured node out.
func TestDirectoryMergesNodeTable(t *testing.T) {
	w := testWiring(t, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	w.nodes = []ports.Node{{ID: "cfg-1", IP: "127.0.0.1", Addr: "127.0.0.1:1"}, {ID: "cfg-2", IP: "127.0.0.1", Addr: "127.0.0.1:2"}}
	i := newInjector(w)
	defer i.Shutdown()
	st := do.MustInvoke[*entstore.Store](i)
	defer st.Close()
	ctx := t.Context()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []ports.NodeRecord{
		{NodeID: "db-1", GRPCAddr: "127.0.0.1:3"},
		{NodeID: "cfg-2", Disabled: true},
	} {
		if err := st.Nodes().Upsert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	dir := do.MustInvoke[*nodedir.Directory](i)
	defer dir.Close()
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range dir.Statuses() {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"cfg-1", "db-1"}) {
		t.Fatalf("directory lists %v, want [cfg-1 db-1]", ids)
	}
}

// TestStoreErrorNamesTheVariableSet: with only the data plane's DSN set (the
// master reads it), a database the master cannot open is reported under
// that variable, not under CUBE_MASTER_DB_DSN, which nobody set.
func TestStoreErrorNamesTheVariableSet(t *testing.T) {
	cfg, err := config.Load(func(k string) (string, bool) {
		if k == "CUBE_TEMPLATE_CENTER_DB_DSN" {
			return "mysql://u:p@tcp(127.0.0.1:1)/cube", true // nothing listens on port 1
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	w := testWiring(t, cfg.Master.DBDSN)
	w.cfg.Sources = cfg.Sources
	i := newInjector(w)
	defer i.Shutdown()
	_, err = do.Invoke[*entstore.Store](i)
	if err == nil || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_DB_DSN (the master's database while CUBE_MASTER_DB_DSN is unset)") ||
		strings.Contains(err.Error(), "CUBE_MASTER_DB_DSN:") {
		t.Fatalf("store error %v, want it to name CUBE_TEMPLATE_CENTER_DB_DSN", err)
	}
}

// TestReadinessNeedsTheDataPlanesToken: the master's /ready asks the data
// plane with its callback token; when the two services were given
// different tokens (every build and callback between them would be
// refused), data_plane is not ok. With no node configured at all, the
// nodes check does not hold the master unready.
func TestReadinessNeedsTheDataPlanesToken(t *testing.T) {
	blobs, err := artifactstore.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	for _, tc := range []struct {
		name, dataPlaneToken string
		code                 int
		want                 string
	}{
		{"same token", "0123456789abcdef-token", http.StatusOK, `"data_plane":{"status":"ok"}`},
		{"different tokens", "fedcba9876543210-token", http.StatusServiceUnavailable, `"data_plane":{"status":"failed","error":"callback token mismatch"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc2 := httptest.NewServer(tcapi.New(tcapi.Config{Token: tc.dataPlaneToken, Store: blobs}))
			defer tc2.Close()
			w := testWiring(t, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
			w.cfg.CallbackToken = "0123456789abcdef-token"
			w.tcBase = tc2.URL
			i := newInjector(w)
			defer i.Shutdown()
			defer do.MustInvoke[*entstore.Store](i).Close()
			h := do.MustInvoke[http.Handler](i)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
			body := rec.Body.String()
			if rec.Code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("/ready %d %s, want %d with %s", rec.Code, body, tc.code, tc.want)
			}
			if !strings.Contains(body, `"nodes":{"status":"ok","detail":"none configured`) {
				t.Errorf("/ready %s: no node configured should not be a failure", body)
			}
		})
	}
}

// TestConsoleIsMounted: the master serves the web console's files, with
// their security headers, without credentials, while the API the page
// calls still refuses a caller without them.
func TestConsoleIsMounted(t *testing.T) {
	w := testWiring(t, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	w.cfg.Master.Auth.Enabled = true
	w.cfg.Master.Auth.BearerTokens = []string{"console-wiring-token-0123"}
	i := newInjector(w)
	defer i.Shutdown()
	defer do.MustInvoke[*entstore.Store](i).Close()
	h := do.MustInvoke[http.Handler](i)
	for _, tc := range []struct {
		target   string
		code     int
		location string
	}{
		{"/console", http.StatusMovedPermanently, "/console/"},
		{"/console/", http.StatusOK, ""},
		{"/console/app.js", http.StatusOK, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
		if rec.Code != tc.code || rec.Header().Get("Location") != tc.location {
			t.Errorf("GET %s = %d (Location %q), want %d %q", tc.target, rec.Code, rec.Header().Get("Location"), tc.code, tc.location)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s has CSP %q", tc.target, csp)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cube/template", nil))
	if !strings.Contains(rec.Body.String(), `"ret_code":130401`) {
		t.Errorf("GET /cube/template without a token = %d %s, want 130401", rec.Code, rec.Body.String())
	}
}
