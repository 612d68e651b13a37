package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// screenshots makes the console tests write their screenshots into
// docs/console (go test ./apps/cubemaster -run TestConsole -screenshots).
var screenshots = flag.Bool("screenshots", false, "write the console tests' screenshots into docs/console")

// chromiumPath is Debian's chromium. Without it the browser tests skip,
// or fail when CUBE_TEST_REQUIRE_SERVERS=1 (CI installs it in .ci/run).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium is not installed (apt-get install -y chromium)"
	if os.Getenv("CUBE_TEST_REQUIRE_SERVERS") == "1" {
		t.Fatal(msg + "; CUBE_TEST_REQUIRE_SERVERS=1 needs it")
	}
	t.Skip(msg)
	return ""
}

// cubemasterPath is $CUBE_TEST_BIN_DIR/cubemaster (make build) when it
// exists, else a fresh build.
func cubemasterPath(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CUBE_TEST_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, "cubemaster")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return buildBinary(t)
}

// browser is one headless chromium tab; problems collects what the page
// reported: console errors and warnings, uncaught exceptions, failed
// loads, CSP violations and any dialog (a script a hostile string ran).
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		wg.Wait()
	})
	// Subscribed before the first page loads, so nothing is missed.
	messages := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				b.problem("%s (%s:%d)", m, m.URL, m.Line)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.problem("a dialog opened: %q", ev.Message)
		}
	}()
	return b
}

func (b *browser) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// do runs steps, failing the test (with the page's text) if they do not
// finish within two minutes.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Fatalf("%s: %v\npage text:\n%s\nproblems: %q", what, err, text, b.problems)
}

// waitJS waits until expr is true in the page.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(110*time.Second))); err != nil {
		b.fail(what, err)
	}
}

// eval returns the value of expr in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`document.querySelector(%q)?.textContent ?? ''`, sel))
}

// screenshot writes the viewport to docs/console/name.png with
// -screenshots.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if !*screenshots {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot", err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "console", name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// noProblems fails the test if the page reported anything.
func (b *browser) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		b.t.Fatalf("the page reported problems:\n%s", strings.Join(b.problems, "\n"))
	}
}

// startDevForConsole runs `cubemaster dev` on free loopback ports and
// returns what it wrote to its ready file.
func startDevForConsole(t *testing.T) DevInfo {
	t.Helper()
	data := t.TempDir()
	ready := filepath.Join(data, "ready.json")
	logs := &testenv.Buffer{}
	cmd := exec.Command(cubemasterPath(t), "dev", "--data-dir", data, "--listen", "127.0.0.1:0",
		"--registry-listen", "127.0.0.1:0", "--ready-file", ready)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("cubemaster dev log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var info DevInfo
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &info) == nil && info.Console != "" {
			if !strings.Contains(logs.String(), "web console      "+info.Console) {
				t.Errorf("the start summary does not print the console's URL %s:\n%s", info.Console, logs.String())
			}
			return info
		}
		select {
		case err := <-exited:
			t.Fatalf("cubemaster dev exited: %v\n%s", err, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("cubemaster dev not ready:\n%s", logs.String())
	return DevInfo{}
}

// TestConsoleDev drives the console in headless chromium against
// `cubemaster dev` through an operator's day: the list loads; a template
// created from the example image reaches READY on its page without a
// reload, with its history, placement decisions (none), preview and
// artifact; the builds view and the
// build page show the job with its phase timeline and the lines the
// services logged; a second template takes the first one's alias (the
// release step); a merge and redos (all nodes, the nodes typed) run to READY, a redo of the failed nodes is refused as there are none; the nodes view counts both copies;
// the list filters; hostile strings are shown as text; delete needs the
// id typed; and the page reports no problem throughout.
func TestConsoleDev(t *testing.T) {
	chromiumPath(t)
	info := startDevForConsole(t)
	b := newBrowser(t)

	b.do("open the console", chromedp.Navigate(info.Console))
	b.waitJS("the empty list", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	// Set on this document only: still there at the end means no reload.
	eval[string](b, `window.consoleTestMarker = 'same-document'`)

	// Create from the example image; the page moves to the template and
	// follows its build.
	first := b.createFromImage(info.ExampleImage, "console-e2e")
	if art := b.text("#artifact-id"); !strings.HasPrefix(art, "rfs-") {
		t.Errorf("artifact id %q", art)
	}
	// The artifact's format, and the builder dev runs (ext4stream), as
	// the build recorded it: its name and format version.
	if f, bl := b.text("#artifact-format"), b.text("#artifact-builder"); f != "ext4 (raw)" || bl != ext4stream.Name+"/"+ext4stream.FormatVersion {
		t.Errorf("artifact format %q, builder %q; want ext4 (raw) by %s/%s", f, bl, ext4stream.Name, ext4stream.FormatVersion)
	}
	if req := b.text("#stored-request"); !strings.Contains(req, info.ExampleImage) && !strings.Contains(req, "{") {
		t.Errorf("stored request %q", req)
	}
	if phases := b.text("#phase-table"); !strings.Contains(phases, "PULLING") {
		t.Errorf("phase durations %q", phases)
	}
	b.waitJS("the job history", `document.querySelectorAll('#history-table tbody tr').length === 1`)
	b.waitJS("the merged preview", `(document.querySelector('#preview-merged')?.textContent || '').includes('rfs-')`)
	// The default policy (no pins, no budgets) decides nothing about it.
	b.waitJS("the placement section, empty", `document.querySelector('#placement-empty')?.textContent === 'The placement controller has recorded no decision about this template.'`)
	if p := b.text("#preview-merged"); strings.Contains(p, "token=") && !strings.Contains(p, "token=REDACTED") {
		t.Errorf("the preview shows a download token: %q", p)
	}
	b.screenshot("template")

	// The build page: its timeline and the lines both services logged.
	firstJob := b.text("#job-id")
	b.do("open the build", chromedp.Click(chromedp.CSS("#job-id a")))
	b.waitJS("the build page", `document.querySelector('#build-status')?.textContent === 'READY'`)
	b.waitJS("the log lines", `[...document.querySelectorAll('#log-lines tbody tr')].some(r => r.textContent.includes('build phase finished')) && [...document.querySelectorAll('#log-lines tbody tr')].some(r => r.textContent.includes('template ready'))`)
	if tl := b.text("#timeline"); !strings.Contains(tl, "PULLING") || !strings.Contains(tl, "SNAPSHOTTING") {
		t.Errorf("timeline %q", tl)
	}
	if src := b.text("#log-lines"); !strings.Contains(src, "templatecenter") || !strings.Contains(src, "cubemaster") {
		t.Errorf("the log lacks a service: %q", src)
	}
	b.screenshot("build")

	// Merge (the artifact is already in the data plane's store: the job
	// records it there and is READY at once).
	eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, first))
	b.waitJS("the template page", `document.querySelector('#job-status')?.textContent === 'READY'`)
	b.do("merge", chromedp.Click(chromedp.CSS("#merge-submit")))
	b.waitJS("merged", `document.querySelector('#action-result')?.textContent === 'Merge: done.' && (document.querySelector('#history-table tbody tr')?.textContent || '').includes('MIGRATE') && document.querySelector('#job-status')?.textContent === 'READY'`)

	// A newer template takes the alias: the release step.
	second := b.createFromImage(info.ExampleImage, "")
	// By keyboard: the field, its text and Enter.
	b.do("move the alias here", chromedp.Focus(chromedp.CSS("#alias-input")), chromedp.KeyEvent("console-e2e\r"))
	b.waitJS("the alias moved", `document.querySelector('#action-result')?.textContent === 'Alias console-e2e: done.' && (document.querySelector('#template-head')?.textContent || '').includes('console-e2e')`)

	// Redo on every node: a new job, followed live to READY.
	b.do("redo", chromedp.Click(chromedp.CSS("#redo-submit")))
	b.waitJS("the redo job", `document.querySelectorAll('#history-table tbody tr').length === 2`)
	b.waitJS("the redo reaches READY", `document.querySelector('#job-status')?.textContent === 'READY' && (document.querySelector('#history-table tbody tr')?.textContent || '').includes('REDO')`)

	// Redo the failed nodes only: there are none, and the refusal says so.
	b.do("redo failed only", chromedp.Click(chromedp.CSS("#redo-failed")))
	b.waitJS("refused", `(document.querySelector('#action-result')?.textContent || '').startsWith('Redo failed nodes refused') && document.querySelector('#action-result').textContent.includes('no failed replicas')`)
	// Redo on the nodes typed (by keyboard).
	b.do("redo on node-1", chromedp.Focus(chromedp.CSS("#redo-nodes")), chromedp.KeyEvent("node-1\r"))
	b.waitJS("the node redo reaches READY", `document.querySelectorAll('#history-table tbody tr').length === 3 && document.querySelector('#job-status')?.textContent === 'READY' && (document.querySelector('#history-table tbody tr')?.textContent || '').includes('NODES')`)

	// The builds view lists all five jobs, newest first.
	b.do("the builds view", chromedp.Click(chromedp.CSS(`header a[href="#/builds"]`)))
	b.waitJS("recent builds", `document.querySelectorAll('#recent-jobs tbody tr[data-job-id]').length === 5`)
	if row := b.text(fmt.Sprintf(`#recent-jobs tr[data-job-id=%q]`, firstJob)); !strings.Contains(row, "READY") || !strings.Contains(row, first) {
		t.Errorf("builds row %q", row)
	}
	b.screenshot("builds")

	// The nodes view: node-1 healthy, holding both templates.
	b.do("the nodes view", chromedp.Click(chromedp.CSS(`header a[href="#/nodes"]`)))
	b.waitJS("the node", `(document.querySelector('tr[data-node-id="node-1"]')?.textContent || '').includes('HEALTHY')`)
	if row := b.text(`tr[data-node-id="node-1"]`); !strings.Contains(row, "2") || !strings.Contains(row, "MiB") {
		t.Errorf("node row %q", row)
	}
	b.screenshot("nodes")

	// Keyboard: Tab moves along the header's links and Enter follows
	// one; every control is a native link, button, input or select.
	b.do("tab to Builds", chromedp.Focus(chromedp.CSS("header .brand")), chromedp.KeyEvent("\t\t"))
	if got := eval[string](b, `document.activeElement?.textContent || ''`); got != "Builds" {
		t.Errorf("two Tabs from the brand reached %q", got)
	}
	b.do("enter", chromedp.KeyEvent("\r"))
	b.waitJS("the builds view by keyboard", `location.hash === '#/builds' && !!document.querySelector('#recent-jobs')`)
	if n := eval[int](b, `document.querySelectorAll('[onclick], div[tabindex], span[tabindex]').length`); n != 0 {
		t.Errorf("%d controls that are not native", n)
	}

	// A phone's width: no view scrolls sideways (tables scroll inside
	// their own box).
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	for _, v := range []struct{ hash, ready string }{
		{"#/", `!!document.querySelector('tr[data-template-id]')`},
		{"#/t/" + second, `document.querySelector('#job-status')?.textContent === 'READY' && !!document.querySelector('#history-table')`},
		{"#/builds", `!!document.querySelector('#recent-jobs tr[data-job-id]')`},
		{"#/b/" + firstJob, `!!document.querySelector('#log-lines')`},
		{"#/nodes", `!!document.querySelector('tr[data-node-id]')`},
	} {
		eval[string](b, fmt.Sprintf(`location.hash = %q`, v.hash))
		b.waitJS(v.hash+" at a phone's width", v.ready)
		if w := eval[[]int](b, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
			t.Errorf("%s is %d px wide in a %d px window", v.hash, w[0], w[1])
		}
		if v.hash == "#/b/"+firstJob {
			b.screenshot("phone-build")
		}
	}
	b.do("laptop width", chromedp.EmulateViewport(1200, 800))

	// The list: both READY, the alias on the second, size, builder and
	// update time.
	b.do("back to the list", chromedp.Click(chromedp.CSS(`header a[href="#/"]`)))
	b.waitJS("the rows", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]') && !!document.querySelector('tr[data-template-id=%q]')`, first, second))
	row := b.text(fmt.Sprintf(`tr[data-template-id=%q]`, second))
	for _, want := range []string{"console-e2e", "READY", "1 / 1", info.ExampleImage, "MiB"} {
		if !strings.Contains(row, want) {
			t.Errorf("list row %q lacks %q", row, want)
		}
	}
	if row := b.text(fmt.Sprintf(`tr[data-template-id=%q]`, first)); strings.Contains(row, "console-e2e") || !strings.Contains(row, "1 / 1") {
		t.Errorf("the first template's row (merged, alias moved away) is %q", row)
	}
	for _, id := range []string{first, second} {
		if bl := b.text(fmt.Sprintf(`tr[data-template-id=%q] td.builder`, id)); bl != ext4stream.Name+"/"+ext4stream.FormatVersion {
			t.Errorf("the builder column of %s shows %q, want %s/%s", id, bl, ext4stream.Name, ext4stream.FormatVersion)
		}
	}
	b.do("filter by text", chromedp.SendKeys(chromedp.CSS("#filter-text"), "no-such-template"))
	b.waitJS("filtered out", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	eval[string](b, `document.querySelector('#filter-text').value = ''`)
	b.do("filter again", chromedp.SendKeys(chromedp.CSS("#filter-text"), "console"))
	// Each key asks again; the last answer (one template) wins.
	b.waitJS("filtered in", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]') && document.querySelector('#pager').textContent.includes('1–1 of 1')`, second))
	selectStatus := func(status string) {
		eval[string](b, fmt.Sprintf(`(() => { const s = document.querySelector('#filter-status'); s.value = %q; s.dispatchEvent(new Event('change')); return s.value })()`, status))
	}
	selectStatus("FAILED")
	b.waitJS("no FAILED template", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	eval[string](b, `document.querySelector('#filter-text').value = ''`)
	selectStatus("READY")
	b.waitJS("the READY templates", `document.querySelectorAll('tr[data-template-id]').length === 2`)
	b.screenshot("templates")

	// Hostile strings: an alias the API refuses comes back in its error
	// message, and an id in the address is echoed in the heading; both
	// are text, and no element or script comes of them.
	const hostile = `<img src=x onerror=alert(1)>`
	b.do("create with a hostile alias",
		chromedp.SetValue(chromedp.CSS("#create-image"), info.ExampleImage),
		chromedp.SetValue(chromedp.CSS("#create-alias"), hostile),
		chromedp.Click(chromedp.CSS("#create-submit")))
	b.waitJS("refused", `document.querySelector('#create-result')?.textContent.startsWith('Not created')`)
	for _, prefix := range []string{"#/t/", "#/b/"} {
		eval[string](b, fmt.Sprintf(`location.hash = %q + encodeURIComponent(%q)`, prefix, hostile+`"><script>alert(2)</script>`))
		b.waitJS("the hostile id's page", `!!document.querySelector('#template-head .error, #build-head .error')`)
		if title := b.text("h1"); !strings.Contains(title, hostile) {
			t.Errorf("title %q does not show the id as text", title)
		}
		if elements := eval[int](b, `document.querySelectorAll('#view img, #view script').length`); elements != 0 {
			t.Errorf("%d img/script elements came from hostile strings", elements)
		}
	}

	// Clear the alias.
	eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, second))
	b.waitJS("the aliased template", `(document.querySelector('#template-head')?.textContent || '').includes('console-e2e')`)
	b.do("clear the alias", chromedp.Click(chromedp.CSS("#alias-clear")))
	b.waitJS("cleared", `document.querySelector('#action-result')?.textContent === 'Clear alias: done.' && !(document.querySelector('#template-head')?.textContent || '').includes('console-e2e')`)

	// Delete: the button waits for the id typed in full.
	for _, id := range []string{first, second} {
		eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, id))
		b.waitJS("the template page again", `document.querySelector('#job-status')?.textContent === 'READY'`)
		b.do("type part of the id", chromedp.SendKeys(chromedp.CSS("#delete-confirm"), id[:len(id)-1]))
		if !eval[bool](b, `document.querySelector('#delete-submit').disabled`) {
			t.Error("delete is enabled before the whole id is typed")
		}
		b.do("type the rest and delete", chromedp.SendKeys(chromedp.CSS("#delete-confirm"), id[len(id)-1:]),
			chromedp.Click(chromedp.CSS("#delete-submit")))
		b.waitJS("back on the list", fmt.Sprintf(`location.hash === '#/' && !!document.querySelector('#pager') && !document.querySelector('tr[data-template-id=%q]')`, id))
	}
	b.waitJS("the emptied list", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)

	if eval[string](b, `window.consoleTestMarker || ''`) != "same-document" {
		t.Error("the page reloaded during the test")
	}
	b.noProblems()
}

// createFromImage creates a template from the list's form and waits on
// its page until its job is READY; it returns the template's id.
func (b *browser) createFromImage(image, alias string) string {
	b.t.Helper()
	if eval[string](b, `location.hash`) != "#/" && eval[string](b, `location.hash`) != "" {
		b.do("to the list", chromedp.Click(chromedp.CSS(`header a[href="#/"]`)))
	}
	b.waitJS("the create form", `!!document.querySelector('#create-image')`)
	b.do("create from image", chromedp.SetValue(chromedp.CSS("#create-image"), image))
	if alias != "" {
		b.do("the alias", chromedp.SetValue(chromedp.CSS("#create-alias"), alias))
	}
	b.do("submit", chromedp.Click(chromedp.CSS("#create-submit")))
	b.waitJS("the template page", `location.hash.startsWith('#/t/') && !!document.querySelector('#job-id')`)
	id := eval[string](b, `decodeURIComponent(location.hash.slice(4))`)
	b.waitJS("the job reaches READY", `document.querySelector('#job-status')?.textContent === 'READY'`)
	b.waitJS("the replica shows READY", `[...document.querySelectorAll('#replica-table tbody tr')].some(r => r.textContent.includes('READY'))`)
	return id
}

// TestConsoleServe drives the console against `cubemaster serve` with
// public API authentication, a node agent and a data plane played by the
// test: nothing is listed without a token and a wrong one is refused; with
// the right one (kept in sessionStorage, no cookie) a template created from
// the form goes READY on its page without a reload once the data plane
// reports it built; a second one takes the first one's alias; a redo runs
// to READY; both are deleted by typing their ids; the page reports no
// problem throughout.
func TestConsoleServe(t *testing.T) {
	chromiumPath(t)
	dir := t.TempDir()
	const token = "console-serve-callback-token"
	data := bytes.Repeat([]byte("ext4-ish bytes "), 4096)
	tc := &fakeTC{artifact: data}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := startMaster(t, "CUBE_TEMPLATE_CENTER_DB_DSN=sqlite://"+filepath.Join(dir, "cube.db"),
		"CUBE_TEMPLATE_CENTER_ADDR="+tcSrv.URL, "CUBE_TEMPLATE_CALLBACK_TOKEN="+token,
		"CUBE_MASTER_ENVD_HOST_DIR="+filepath.Join(dir, "no-envd"), "CUBE_MASTER_NODE_TOKEN="+nodeToken,
		"CUBE_MASTER_NODES=node-1="+ln.Addr().String())
	ag, err := agent.New(agent.Config{DataDir: filepath.Join(dir, "node"), NodeID: "node-1", Token: nodeToken, MasterURLs: []string{m.base},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gs := ag.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()
	waitHealthy(t, m.base+"/ready")
	b := newBrowser(t)

	b.do("open the console", chromedp.Navigate(m.base+"/console/"))
	b.waitJS("the token form", `!document.querySelector('#auth').hidden && !!document.querySelector('#list-message .error')`)
	if rows := eval[int](b, `document.querySelectorAll('tr[data-template-id]').length`); rows != 0 {
		t.Fatalf("%d templates shown without a token", rows)
	}
	b.screenshot("token")
	eval[string](b, `window.consoleTestMarker = 'same-document'`)
	b.do("a wrong token", chromedp.SendKeys(chromedp.CSS("#auth-token"), "not-the-token-0000000000"), chromedp.Click(chromedp.CSS("#auth-submit")))
	b.waitJS("refused again", `!document.querySelector('#auth').hidden && document.querySelector('#auth-error').textContent.startsWith('The token was refused')`)
	b.do("the right token", chromedp.SendKeys(chromedp.CSS("#auth-token"), apiBearer), chromedp.Click(chromedp.CSS("#auth-submit")))
	b.waitJS("the empty list", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	if stored := eval[string](b, `sessionStorage.getItem('cube.console.token') + '|' + document.cookie`); stored != apiBearer+"|" {
		t.Errorf("token kept as %q (want sessionStorage only, no cookie)", stored)
	}

	// create makes a template from the form and plays the data plane
	// reporting it built; the page follows it to READY.
	const registrySecret = "s3cret-registry-password-0123"
	create := func(withCredentials bool) string {
		t.Helper()
		b.do("to the list", chromedp.Click(chromedp.CSS(`header a[href="#/"]`)))
		b.waitJS("the form", `!!document.querySelector('#create-image')`)
		b.do("the image", chromedp.SetValue(chromedp.CSS("#create-image"), "registry.example/app:1"))
		if withCredentials {
			b.do("registry credentials and nodes", chromedp.Click(chromedp.CSS("#create-form summary")),
				chromedp.SendKeys(chromedp.CSS("#create-registry-user"), "robot"),
				chromedp.SendKeys(chromedp.CSS("#create-registry-password"), registrySecret),
				chromedp.SendKeys(chromedp.CSS("#create-nodes"), "node-1"))
		}
		b.do("create", chromedp.Click(chromedp.CSS("#create-submit")))
		b.waitJS("the template page", `location.hash.startsWith('#/t/') && document.querySelector('#job-status')?.textContent === 'PENDING'`)
		id := eval[string](b, `decodeURIComponent(location.hash.slice(4))`)
		jobID := eval[string](b, `document.querySelector('#job-id').textContent`)
		built, _ := builtReport(t, id, data)
		resp := call(t, http.MethodPost, m.base+wire.JobStatusPath(jobID), built, map[string]string{auth.Header: token})
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("BUILT callback: HTTP %d", resp.StatusCode)
		}
		b.waitJS("READY without a reload", `document.querySelector('#job-status')?.textContent === 'READY' && [...document.querySelectorAll('#replica-table tbody tr')].some(r => r.textContent.includes('READY'))`)
		return id
	}
	first := create(false)
	b.do("alias the first", chromedp.Focus(chromedp.CSS("#alias-input")), chromedp.KeyEvent("web-e2e\r"))
	b.waitJS("aliased", `(document.querySelector('#template-head')?.textContent || '').includes('web-e2e')`)
	second := create(true)
	// The credentials reached the data plane with the build, the nodes
	// became its scope, and the page shows the password nowhere (the
	// field is emptied, no answer carries it).
	builds, _ := tc.received()
	if last := builds[len(builds)-1]; last.Request == nil || last.Request.RegistryUsername != "robot" || last.Request.RegistryPassword != registrySecret ||
		len(last.Request.DistributionScope) != 1 || last.Request.DistributionScope[0] != "node-1" {
		t.Errorf("the data plane got %+v", last.Request)
	}
	if shown := eval[bool](b, fmt.Sprintf(`document.body.innerText.includes(%q) || [...document.querySelectorAll('input')].some(i => i.value.includes(%q))`, registrySecret, registrySecret)); shown {
		t.Error("the registry password is shown on the page")
	}
	b.do("move the alias to the second", chromedp.Focus(chromedp.CSS("#alias-input")), chromedp.KeyEvent("web-e2e\r"))
	b.waitJS("moved", `(document.querySelector('#template-head')?.textContent || '').includes('web-e2e')`)
	b.do("redo on every node", chromedp.Click(chromedp.CSS("#redo-submit")))
	b.waitJS("the redo reaches READY", `document.querySelectorAll('#history-table tbody tr').length === 2 && document.querySelector('#job-status')?.textContent === 'READY' && (document.querySelector('#history-table tbody tr')?.textContent || '').includes('REDO')`)

	b.do("the list", chromedp.Click(chromedp.CSS(`header a[href="#/"]`)))
	b.waitJS("both rows", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]') && !!document.querySelector('tr[data-template-id=%q]')`, first, second))
	if row := b.text(fmt.Sprintf(`tr[data-template-id=%q]`, second)); !strings.Contains(row, "web-e2e") {
		t.Errorf("the second template's row lacks the alias: %q", row)
	}
	if row := b.text(fmt.Sprintf(`tr[data-template-id=%q]`, first)); strings.Contains(row, "web-e2e") {
		t.Errorf("the first template kept the alias: %q", row)
	}
	// The builder the data plane's report named, recorded by the master
	// (this data plane keeps no rows).
	if bl := b.text(fmt.Sprintf(`tr[data-template-id=%q] td.builder`, second)); bl != "e2e/1" {
		t.Errorf("the builder column shows %q, want e2e/1 (the BUILT report's)", bl)
	}
	// A job that ends between the page's read of its template and of its
	// job: the page must not keep showing the template as it was before.
	// The job read is held until the job is READY.
	jobID := m.createJob("tpl-race")
	eval[bool](b, `(() => { const orig = window.fetch; window.origFetch = orig; window.released = new Promise((r) => { window.release = r; });
		window.fetch = async (url, init) => { if (String(url).includes('from-image?template_id=')) { window.held = true; await window.released; } return orig(url, init); };
		location.hash = '#/t/tpl-race'; return true })()`)
	b.waitJS("the template read, the job read held", `window.held === true && (document.querySelector('#template-head')?.textContent || '').includes('PENDING')`)
	built, _ := builtReport(t, "tpl-race", data)
	resp := call(t, http.MethodPost, m.base+wire.JobStatusPath(jobID), built, map[string]string{auth.Header: token})
	resp.Body.Close()
	if got := m.waitJob(jobID); got.Job.Status != "READY" {
		t.Fatalf("job %+v", got.Job)
	}
	eval[bool](b, `window.release(), window.fetch = window.origFetch, true`)
	b.waitJS("the template's final state", `document.querySelector('#job-status')?.textContent === 'READY' && (document.querySelector('#template-head')?.textContent || '').includes('READY') && [...document.querySelectorAll('#replica-table tbody tr')].some(r => r.textContent.includes('READY'))`)

	for _, id := range []string{first, second, "tpl-race"} {
		eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, id))
		b.waitJS("the template page", `document.querySelector('#job-status')?.textContent === 'READY'`)
		b.do("type the id and delete", chromedp.SendKeys(chromedp.CSS("#delete-confirm"), id), chromedp.Click(chromedp.CSS("#delete-submit")))
		b.waitJS("gone from the list", fmt.Sprintf(`location.hash === '#/' && !!document.querySelector('#pager') && !document.querySelector('tr[data-template-id=%q]')`, id))
	}
	b.waitJS("the emptied list", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)

	if eval[string](b, `window.consoleTestMarker || ''`) != "same-document" {
		t.Error("the page reloaded during the test")
	}
	b.noProblems()
}
