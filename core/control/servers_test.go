package control_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
	"github.com/cubesandbox/templatecenter/adapters/lock/pglock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// serverEnv is env on a fresh MariaDB or PostgreSQL database of the test
// servers, with the dialect's lock adapter on a lock pool of poolSize
// connections (production gives locks a pool of their own).
func serverEnv(t *testing.T, dialect string, poolSize int, nodeIDs ...string) *env {
	t.Helper()
	ctx := context.Background()
	dsn, drop, err := testenv.Database(ctx, t, dialect, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop() })
	st, err := entstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db, _, err := entstore.OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(poolSize)
	var locker ports.Locker = pglock.New(db)
	if dialect == "mysql" {
		locker = mysqllock.New(db)
	}
	return newEnvOn(t, &fakeClock{t: t0}, st, locker, nodeIDs...)
}

var serverDialects = []string{"mysql", "postgres"}

// TestDeleteHoldsOneLockAtATime (MariaDB, PostgreSQL): each held lock pins
// a connection of the bounded lock pool. A delete that waited for its
// artifact's lock while holding its template's needed two at once: on a
// pool of one (or with as many concurrent deletes as the pool has
// connections) it waited for ever. Now it cleans the artifact after
// releasing the template's lock. Before, the delete below ran into its
// deadline.
func TestDeleteHoldsOneLockAtATime(t *testing.T) {
	for _, dialect := range serverDialects {
		for _, tc := range []struct {
			name  string
			setup func(e *env)
		}{
			{"ready template", func(e *env) { e.ready("tpl-del", fpA) }},
			// Telling a stuck resume from a live one takes the artifact's
			// lock too.
			{"stuck BUILT job", func(e *env) {
				e.svc.Config.StaleAfter = time.Nanosecond
				j := e.create(request("tpl-del"))
				if _, err := e.store.Jobs().Update(e.ctx, j.JobID, func(j *core.Job) error {
					j.Status, j.Phase, j.ArtifactID, j.Fingerprint, j.ActiveKey = core.JobBuilt, core.PhaseReady, aidOf(fpA), fpA, ""
					return nil
				}); err != nil {
					e.t.Fatal(err)
				}
			}},
		} {
			t.Run(dialect+"/"+tc.name, func(t *testing.T) {
				e := serverEnv(t, dialect, 1, "node-1")
				tc.setup(e)
				// The deadline only keeps a deadlock from hanging the test.
				ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
				defer cancel()
				if err := e.svc.Delete(ctx, "tpl-del", ""); err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if _, err := e.store.Jobs().Latest(e.ctx, "tpl-del"); err == nil {
					t.Error("the template's jobs are left")
				}
				if _, err := e.store.Artifacts().Get(e.ctx, aidOf(fpA)); err == nil {
					t.Error("the artifact of the deleted template is left")
				}
			})
		}
	}
}

// TestQueuedResumesLeaveTheLockPoolToOthers (MariaDB, PostgreSQL): several
// templates share one artifact; while one resume distributes it (holding
// the artifact's lock), the others' resumes wait for that lock. Waiting
// must not take the lock pool's connections: a create of an unrelated
// template (its template lock) still goes through. Before, every waiter
// pinned a connection for its whole wait, and on a pool of two the create
// below ran into its deadline.
func TestQueuedResumesLeaveTheLockPoolToOthers(t *testing.T) {
	for _, dialect := range serverDialects {
		t.Run(dialect, func(t *testing.T) {
			e := serverEnv(t, dialect, 2, "node-1")
			inCreate, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			e.agent.CreateImageFunc = func(context.Context, ports.Node, core.NodeArtifact) error {
				once.Do(func() { close(inCreate) })
				<-release
				return nil
			}
			t.Cleanup(func() { close(release); e.wait() }) // before the database goes
			first := e.create(request("tpl-share-0"))
			e.build(first.JobID, fpA)
			<-inCreate // its resume holds the artifact's lock
			// Each create takes its template's lock; the deadline only keeps
			// a starved pool from hanging the test.
			ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
			defer cancel()
			for _, tid := range []string{"tpl-share-1", "tpl-share-2", "tpl-share-3", "tpl-unrelated"} {
				j, err := e.svc.CreateFromImage(ctx, request(tid), baseURL)
				if err != nil {
					t.Fatalf("create %s while resumes queue on another artifact: %v", tid, err)
				}
				if tid != "tpl-unrelated" {
					e.build(j.JobID, fpA) // its resume waits for the artifact's lock
					waitForLockWaiter(e, tid)
				}
			}
		})
	}
}

// waitForLockWaiter gives tid's resume, started in the background, the
// time to reach its wait for the artifact's lock; it asserts nothing.
func waitForLockWaiter(e *env, tid string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if j, err := e.store.Jobs().Latest(e.ctx, tid); err == nil && j.Status == core.JobBuilt {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}
