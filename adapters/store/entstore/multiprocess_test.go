package entstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/storetest"
)

// The multi-process I1 test: the test binary runs itself as two child
// processes (TestI1Child, selected by -test.run and switched on by env vars),
// each with storetest.Submitters goroutines that submit the identical request
// against one fresh database. A file barrier written by the parent releases
// both children at the same moment. Only the database's unique index on
// active_key stands between them and a duplicate active job.

const (
	childDirEnv = "CUBE_I1_CHILD_DIR" // the shared work directory
	childIDEnv  = "CUBE_I1_CHILD_ID"  // "0" or "1"
	processes   = 2
	phaseWait   = 90 * time.Second
)

// i1Plan is what the parent tells the children.
type i1Plan struct {
	DSN       string   `json:"dsn"`
	Templates []string `json:"templates"` // one per round
}

// i1Result is one SubmitFromImage outcome.
type i1Result struct {
	JobID   string `json:"job_id,omitempty"`
	Created bool   `json:"created,omitempty"`
	Err     string `json:"err,omitempty"`
}

// round is what the parent learned from one round.
type round struct {
	results    []i1Result
	activeRows int
	jobRows    int
	jobIDs     map[string]int
	created    int
	errs       int
}

func TestMultiProcessI1(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			began := time.Now()
			s, dsn := openFresh(t, d)
			t.Logf("fresh migrated database in %s", time.Since(began).Round(time.Millisecond))
			rounds := runI1Processes(t, s, dsn, 3, nil)
			for i, r := range rounds {
				t.Logf("round %d: %d results, %d created, %d distinct job ids, %d errors, %d job rows, %d active rows",
					i, len(r.results), r.created, len(r.jobIDs), r.errs, r.jobRows, r.activeRows)
				if r.errs > 0 {
					for _, res := range r.results {
						if res.Err != "" {
							t.Fatalf("round %d: a submitter failed: %s", i, res.Err)
						}
					}
				}
				if len(r.results) != processes*storetest.Submitters {
					t.Fatalf("round %d: %d results, want %d", i, len(r.results), processes*storetest.Submitters)
				}
				if len(r.jobIDs) != 1 || r.created != 1 || r.activeRows != 1 || r.jobRows != 1 {
					t.Fatalf("round %d: invariant I1 broken across processes: %d distinct job ids, %d created, %d job rows, %d active rows",
						i, len(r.jobIDs), r.created, r.jobRows, r.activeRows)
				}
			}
		})
	}
}

// TestMultiProcessI1NeedsUniqueKey shows that the test above can fail: with
// the unique index on active_key dropped after migration, the same race
// produces more than one active job for the template.
func TestMultiProcessI1NeedsUniqueKey(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			s, dsn := openFresh(t, d)
			dropActiveKeyIndex(t, s)
			// A round races only when two inserts land inside each other's
			// check: about half the rounds here, fewer on some machines (CI
			// once saw five rounds in a row without one). The run stops at
			// the first duplicate, so the cap costs time only when the
			// index would not be needed.
			const maxRounds = 50
			seen := 0
			rounds := runI1Processes(t, s, dsn, maxRounds, func(r round) bool { return r.activeRows > 1 })
			for i, r := range rounds {
				t.Logf("round %d without the unique key: %d created, %d distinct job ids, %d errors, %d job rows, %d ACTIVE rows",
					i, r.created, len(r.jobIDs), r.errs, r.jobRows, r.activeRows)
				if r.activeRows > 1 {
					seen++
				}
				for _, res := range r.results {
					if res.Err != "" {
						t.Logf("round %d: a failed submitter said: %s", i, res.Err)
						break
					}
				}
			}
			if seen == 0 {
				t.Fatalf("no round out of %d produced a duplicate active job without the unique key; the I1 test may not be able to fail", len(rounds))
			}
		})
	}
}

// dropActiveKeyIndex is the test-only switch that removes what enforces I1.
func dropActiveKeyIndex(t testing.TB, s *entstore.Store) {
	t.Helper()
	q := "DROP INDEX idx_template_image_active_key"
	if s.Dialect() == "mysql" {
		q += " ON t_cube_template_image_job"
	}
	if _, err := s.DB().ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// runI1Processes runs up to n rounds across two child processes and returns
// what each round produced; stop, if given, ends the run early.
func runI1Processes(t *testing.T, s *entstore.Store, dsn string, n int, stop func(round) bool) []round {
	t.Helper()
	dir := t.TempDir()
	plan := i1Plan{DSN: dsn}
	for i := 0; i < n; i++ {
		plan.Templates = append(plan.Templates, fmt.Sprintf("tpl-mp-%d-%s", i, storetest.IDs{}.NewHex()[:12]))
	}
	b, _ := json.Marshal(plan)
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type child struct {
		cmd *exec.Cmd
		out *os.File
	}
	var children []child
	for i := 0; i < processes; i++ {
		out, err := os.Create(filepath.Join(dir, fmt.Sprintf("child-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestI1Child$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childIDEnv+"="+strconv.Itoa(i))
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, child{cmd, out})
	}
	childLogs := func() string {
		var all string
		for i := range children {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("child-%d.log", i)))
			all += fmt.Sprintf("--- child %d:\n%s\n", i, b)
		}
		return all
	}
	defer func() {
		// Tell children that are still waiting to stop, then reap them.
		_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600)
		for _, c := range children {
			_ = c.cmd.Wait()
			_ = c.out.Close()
		}
	}()

	var rounds []round
	began := time.Now()
	for r := 0; r < n; r++ {
		t.Logf("round %d starts %s after the children were started", r, time.Since(began).Round(time.Millisecond))
		for i := 0; i < processes; i++ {
			if err := waitFile(ctx, filepath.Join(dir, fmt.Sprintf("ready-%d-%d", r, i))); err != nil {
				t.Fatalf("round %d: child %d never got ready: %v\n%s", r, i, err, childLogs())
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go-%d", r)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var got round
		for i := 0; i < processes; i++ {
			p := filepath.Join(dir, fmt.Sprintf("result-%d-%d.json", r, i))
			if err := waitFile(ctx, p); err != nil {
				t.Fatalf("round %d: child %d wrote no result: %v\n%s", r, i, err, childLogs())
			}
			var res []i1Result
			b, err := os.ReadFile(p)
			if err == nil {
				err = json.Unmarshal(b, &res)
			}
			if err != nil {
				t.Fatalf("round %d: result of child %d: %v", r, i, err)
			}
			got.results = append(got.results, res...)
		}
		got.jobIDs = map[string]int{}
		for _, res := range got.results {
			if res.Err != "" {
				got.errs++
				continue
			}
			got.jobIDs[res.JobID]++
			if res.Created {
				got.created++
			}
		}
		got.jobRows, got.activeRows = countJobs(t, s, plan.Templates[r])
		rounds = append(rounds, got)
		if stop != nil && stop(got) {
			break
		}
	}
	return rounds
}

func countJobs(t *testing.T, s *entstore.Store, templateID string) (all, active int) {
	t.Helper()
	ph := "?"
	if s.Dialect() == "postgres" {
		ph = "$1"
	}
	row := s.DB().QueryRowContext(context.Background(),
		"SELECT COUNT(*), COUNT(active_key) FROM t_cube_template_image_job WHERE template_id = "+ph, templateID)
	if err := row.Scan(&all, &active); err != nil {
		t.Fatal(err)
	}
	return all, active
}

// waitFile polls for a file written by another process.
func waitFile(ctx context.Context, path string) error {
	deadline := time.Now().Add(phaseWait)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", filepath.Base(path), phaseWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// TestI1Child is the child process of the multi-process tests; it does
// nothing unless the parent started it.
func TestI1Child(t *testing.T) {
	dir := os.Getenv(childDirEnv)
	if dir == "" {
		t.Skip("child process of TestMultiProcessI1; runs only when started by it")
	}
	id := os.Getenv(childIDEnv)
	b, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	var plan i1Plan
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := entstore.Open(ctx, plan.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Locks only keep duplicate work away; the unique active key alone must
	// decide, so the submitters here take a lock that excludes nobody.
	svc := &control.Service{Store: s, Locker: openLocker{}, IDs: storetest.IDs{}}

	for r, tpl := range plan.Templates {
		results := make([]i1Result, storetest.Submitters)
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		for i := range storetest.Submitters {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				req := fromImageRequest(tpl)
				ready.Done()
				<-start
				res, err := svc.SubmitFromImage(ctx, req)
				switch {
				case err != nil:
					results[i].Err = err.Error()
				case res.Job == nil:
					results[i].Err = "no job and no error"
				default:
					results[i] = i1Result{JobID: res.Job.JobID, Created: res.Created}
				}
			}()
		}
		ready.Wait()
		// Warm the pool so the race is about the database, not dialing.
		if err := warmPool(ctx, s.DB(), storetest.Submitters); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d-%s", r, id)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := waitBarrier(ctx, dir, fmt.Sprintf("go-%d", r)); err != nil {
			close(start)
			done.Wait()
			t.Fatal(err)
		}
		close(start)
		done.Wait()
		b, _ := json.Marshal(results)
		tmp := filepath.Join(dir, fmt.Sprintf(".result-%d-%s", r, id))
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// Rename so the parent never reads a half-written file.
		if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("result-%d-%s.json", r, id))); err != nil {
			t.Fatal(err)
		}
	}
}

// fromImageRequest returns a valid request for templateID; every call
// differs only in the request id, which is not part of the idempotency key.
func fromImageRequest(templateID string) *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID:         storetest.IDs{}.NewJobID(),
		SourceImageRef:    "registry.example/team/app:1.0",
		RegistryPassword:  "secret",
		TemplateID:        templateID,
		WritableLayerSize: "1Gi",
		ExposedPorts:      []int32{8080, 9000},
	}
}

// warmPool opens n connections and keeps them idle in the pool.
func warmPool(ctx context.Context, db *sql.DB, n int) error {
	db.SetMaxIdleConns(n)
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitBarrier waits for the parent's go file, or its stop file.
func waitBarrier(ctx context.Context, dir, name string) error {
	for {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return nil
		}
		if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
			return errors.New("parent stopped the run")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// openLocker grants every lock at once: the submitters race on the
// database alone.
type openLocker struct{}

func (openLocker) Lock(_ context.Context, name string) (ports.Lock, error) {
	return openLock(name), nil
}
func (openLocker) TryLock(_ context.Context, name string) (ports.Lock, error) {
	return openLock(name), nil
}

type openLock string

func (l openLock) Name() string               { return string(l) }
func (openLock) Unlock(context.Context) error { return nil }
func (openLock) Lost() <-chan struct{}        { return nil }
