package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
// `cubemaster dev`: the list loads, a template created from the example
// image reaches READY on its page without a reload, the list shows it,
// hostile strings are shown as text, the template is deleted after its id
// is typed, and the page reports no problem throughout.
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
	b.do("create from image",
		chromedp.SetValue(chromedp.CSS("#create-image"), info.ExampleImage),
		chromedp.SetValue(chromedp.CSS("#create-alias"), "console-e2e"),
		chromedp.Click(chromedp.CSS("#create-submit")))
	b.waitJS("the template page", `location.hash.startsWith('#/t/') && !!document.querySelector('#job-id')`)
	id := eval[string](b, `decodeURIComponent(location.hash.slice(4))`)
	b.waitJS("the job reaches READY", `document.querySelector('#job-status')?.textContent === 'READY'`)
	b.waitJS("the replica shows READY", `[...document.querySelectorAll('#replica-table tbody tr')].some(r => r.textContent.includes('READY'))`)
	if art := b.text("#artifact-id"); !strings.HasPrefix(art, "rfs-") {
		t.Errorf("artifact id %q", art)
	}
	if req := b.text("#stored-request"); !strings.Contains(req, info.ExampleImage) && !strings.Contains(req, "{") {
		t.Errorf("stored request %q", req)
	}
	if phases := b.text("#phase-table"); !strings.Contains(phases, "PULLING") && !strings.Contains(phases, "pull") {
		t.Errorf("phase durations %q", phases)
	}
	b.screenshot("template")

	// The list shows it READY with its copy.
	b.do("back to the list", chromedp.Click(chromedp.CSS(`a[href="#/"]`)))
	b.waitJS("the row", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]')`, id))
	row := b.text(fmt.Sprintf(`tr[data-template-id=%q]`, id))
	for _, want := range []string{"console-e2e", "READY", "1 / 1", info.ExampleImage} {
		if !strings.Contains(row, want) {
			t.Errorf("list row %q lacks %q", row, want)
		}
	}
	b.do("filter by text", chromedp.SendKeys(chromedp.CSS("#filter-text"), "no-such-template"))
	b.waitJS("filtered out", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	eval[string](b, `document.querySelector('#filter-text').value = ''`)
	b.do("filter again", chromedp.SendKeys(chromedp.CSS("#filter-text"), "console"))
	b.waitJS("filtered in", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]')`, id))
	if pager := b.text("#pager"); !strings.Contains(pager, "1–1 of 1") {
		t.Errorf("pager %q", pager)
	}
	selectStatus := func(status string) {
		eval[string](b, fmt.Sprintf(`(() => { const s = document.querySelector('#filter-status'); s.value = %q; s.dispatchEvent(new Event('change')); return s.value })()`, status))
	}
	selectStatus("FAILED")
	b.waitJS("no FAILED template", `document.querySelector('#template-rows')?.textContent === 'No templates match.'`)
	selectStatus("READY")
	b.waitJS("the READY template", fmt.Sprintf(`!!document.querySelector('tr[data-template-id=%q]')`, id))
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
	eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, hostile+`"><script>alert(2)</script>`))
	b.waitJS("the hostile id's page", `!!document.querySelector('#template-head .error')`)
	if title := b.text("#template-title"); !strings.Contains(title, hostile) {
		t.Errorf("title %q does not show the id as text", title)
	}
	if elements := eval[int](b, `document.querySelectorAll('#view img, #view script').length`); elements != 0 {
		t.Errorf("%d img/script elements came from hostile strings", elements)
	}

	// Delete: the button waits for the id typed in full.
	eval[string](b, fmt.Sprintf(`location.hash = '#/t/' + encodeURIComponent(%q)`, id))
	b.waitJS("the template page again", `document.querySelector('#job-status')?.textContent === 'READY'`)
	b.do("type part of the id", chromedp.SendKeys(chromedp.CSS("#delete-confirm"), id[:len(id)-1]))
	if !eval[bool](b, `document.querySelector('#delete-submit').disabled`) {
		t.Error("delete is enabled before the whole id is typed")
	}
	b.do("type the rest and delete", chromedp.SendKeys(chromedp.CSS("#delete-confirm"), id[len(id)-1:]),
		chromedp.Click(chromedp.CSS("#delete-submit")))
	b.waitJS("back on the emptied list", `location.hash === '#/' && document.querySelector('#template-rows')?.textContent === 'No templates match.'`)

	if eval[string](b, `window.consoleTestMarker || ''`) != "same-document" {
		t.Error("the page reloaded during the test")
	}
	b.noProblems()
}

// TestConsoleServeNeedsToken: against `cubemaster serve` with public
// authentication, the console shows nothing about templates until the
// operator gives a token the master accepts; a wrong one is refused.
func TestConsoleServeNeedsToken(t *testing.T) {
	chromiumPath(t)
	dir := t.TempDir()
	tc := httptest.NewServer(&fakeTC{})
	defer tc.Close()
	m := startMaster(t, "CUBE_TEMPLATE_CENTER_DB_DSN=sqlite://"+filepath.Join(dir, "cube.db"),
		"CUBE_TEMPLATE_CENTER_ADDR="+tc.URL, "CUBE_TEMPLATE_CALLBACK_TOKEN=console-callback-token",
		"CUBE_MASTER_ENVD_HOST_DIR="+filepath.Join(dir, "no-envd"))
	m.createJob("tpl-console-auth")
	b := newBrowser(t)

	b.do("open the console", chromedp.Navigate(m.base+"/console/"))
	b.waitJS("the token form", `!document.querySelector('#auth').hidden && !!document.querySelector('#list-message .error')`)
	if rows := eval[int](b, `document.querySelectorAll('tr[data-template-id]').length`); rows != 0 {
		t.Fatalf("%d templates shown without a token", rows)
	}
	b.screenshot("token")

	b.do("a wrong token", chromedp.SendKeys(chromedp.CSS("#auth-token"), "not-the-token-0000000000"), chromedp.Click(chromedp.CSS("#auth-submit")))
	b.waitJS("refused again", `!document.querySelector('#auth').hidden && document.querySelector('#auth-error').textContent.startsWith('The token was refused')`)

	b.do("the right token", chromedp.SendKeys(chromedp.CSS("#auth-token"), apiBearer), chromedp.Click(chromedp.CSS("#auth-submit")))
	b.waitJS("the list", `!!document.querySelector('tr[data-template-id="tpl-console-auth"]')`)
	if stored := eval[string](b, `sessionStorage.getItem('cube.console.token') + '|' + document.cookie`); stored != apiBearer+"|" {
		t.Errorf("token kept as %q (want sessionStorage only, no cookie)", stored)
	}
	b.noProblems()
}
