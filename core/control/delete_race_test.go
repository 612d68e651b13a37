package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// waitSignalLocker reports every Lock call on a name with a prefix.
type waitSignalLocker struct {
	ports.Locker
	prefix string
	asked  chan string
}

func (l *waitSignalLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	if strings.HasPrefix(name, l.prefix) {
		select {
		case l.asked <- name:
		default:
		}
	}
	return l.Locker.Lock(ctx, name)
}

// TestRedoDuringDeleteWaitsForIt: a redo submitted while a delete of the
// same template is under way must wait for the delete and then find
// nothing to redo. Before, the redo created its job at once, the delete
// then removed every job row of the template (the live one included), and
// the redo's resume snapshotted the template on the node after the delete:
// a node template nobody knew about.
func TestRedoDuringDeleteWaitsForIt(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-race", fpA)
	snaps := len(e.agent.AppSnapshotCalls())

	inCleanup, release := make(chan struct{}), make(chan struct{})
	e.agent.CleanupTemplateFunc = func(context.Context, ports.Node, string, string) error {
		close(inCleanup)
		<-release
		return nil
	}
	delErr := make(chan error, 1)
	go func() { delErr <- e.svc.Delete(e.ctx, "tpl-race", "") }()
	<-inCleanup // the delete holds the template and is cleaning up the node

	wl := &waitSignalLocker{Locker: e.locker, prefix: "tc_template_", asked: make(chan string, 4)}
	e.svc.Locker = wl
	redoErr := make(chan error, 1)
	go func() {
		_, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-race"})
		redoErr <- err
	}()
	select {
	case <-wl.asked:
	case err := <-redoErr:
		close(release)
		<-delErr
		t.Fatalf("redo finished (err=%v) while the delete was under way, without waiting for the template", err)
	case <-time.After(10 * time.Second):
		t.Fatal("redo neither waited for the template nor finished")
	}
	close(release)
	if err := <-delErr; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantErrIs(t, <-redoErr, core.ErrNotFound)
	e.wait()
	if jobs, _ := e.store.Jobs().ListByTemplate(e.ctx, "tpl-race"); len(jobs) != 0 {
		t.Errorf("%d job rows left after the delete", len(jobs))
	}
	eq(t, "snapshots after the delete", len(e.agent.AppSnapshotCalls()), snaps)
}
