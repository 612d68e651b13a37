package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// roundRobin is a balancer: each request goes to the next live backend.
type roundRobin struct {
	mu       sync.Mutex
	backends []*httputil.ReverseProxy
	names    []string
	n        atomic.Uint64
	served   sync.Map // backend name -> *atomic.Int64
}

func (rr *roundRobin) set(bases ...string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.backends, rr.names = nil, nil
	for _, b := range bases {
		u, _ := url.Parse(b)
		rr.backends = append(rr.backends, httputil.NewSingleHostReverseProxy(u))
		rr.names = append(rr.names, b)
	}
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rr.mu.Lock()
	i := int(rr.n.Add(1)) % len(rr.backends)
	p, name := rr.backends[i], rr.names[i]
	rr.mu.Unlock()
	c, _ := rr.served.LoadOrStore(name, &atomic.Int64{})
	c.(*atomic.Int64).Add(1)
	p.ServeHTTP(w, r)
}

func (rr *roundRobin) count(name string) int64 {
	c, ok := rr.served.Load(name)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// TestConsoleTwoReplicas drives the console through a round-robin
// balancer in front of two `cubemaster serve` replicas on one database,
// with public API authentication: a build's page follows its progress
// live whichever replica answers each poll (the data plane reports to one
// of them), shows its failure with the phase, a copy button for the
// error and the lines the services logged, and still shows those lines
// after the replica that logged them is gone. 1,000 templates are listed and the list's render is measured.
func TestConsoleTwoReplicas(t *testing.T) {
	chromiumPath(t)
	dir := t.TempDir()
	dsn := "sqlite://" + filepath.Join(dir, "cube.db")
	if os.Getenv("CUBE_TEST_POSTGRES_DSN") != "" {
		d, drop, err := testenv.Database(context.Background(), t, "postgres", dir)
		if err != nil {
			t.Fatal(err)
		}
		// Registered first, so it runs after the masters stopped.
		t.Cleanup(func() { _ = drop() })
		dsn = d
	}
	const token = "console-replicas-callback-token"
	tc := httptest.NewServer(&fakeTC{})
	defer tc.Close()
	env := []string{"CUBE_TEMPLATE_CENTER_DB_DSN=" + dsn, "CUBE_TEMPLATE_CENTER_ADDR=" + tc.URL,
		"CUBE_TEMPLATE_CALLBACK_TOKEN=" + token, "CUBE_MASTER_ENVD_HOST_DIR=" + filepath.Join(dir, "no-envd")}
	a := startMaster(t, env...)
	b2 := startMaster(t, env...)
	rr := &roundRobin{}
	rr.set(a.base, b2.base)
	lb := httptest.NewServer(rr)
	defer lb.Close()

	jobID := a.createJob("tpl-live")
	br := newBrowser(t)
	br.do("open the build page", chromedp.Navigate(lb.URL+"/console/#/b/"+jobID))
	br.waitJS("the token form", `!document.querySelector('#auth').hidden`)
	br.do("the token", chromedp.SendKeys(chromedp.CSS("#auth-token"), apiBearer), chromedp.Click(chromedp.CSS("#auth-submit")))
	br.waitJS("the build, PENDING", `document.querySelector('#build-status')?.textContent === 'PENDING'`)
	eval[string](br, `window.consoleTestMarker = 'same-document'`)

	// The data plane reports to replica a only; the page, polling both,
	// moves forward and never back.
	report := func(body string) {
		t.Helper()
		resp := call(t, http.MethodPost, a.base+wire.JobStatusPath(jobID), body, map[string]string{auth.Header: token})
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("report %s: HTTP %d", body, resp.StatusCode)
		}
	}
	// Watches #build-phase and the pulled text and records every value
	// the page showed, to find a step back.
	eval[bool](br, `(() => { window.shown = []; new MutationObserver(() => {
		const t = document.querySelector('#build-head')?.textContent || ''; const m = t.match(/(\d+) B of 1000 B/);
		if (m) { window.shown.push(Number(m[1])); } }).observe(document.querySelector('#view'), {subtree: true, childList: true, characterData: true}); return true })()`)
	for _, n := range []int{200, 500, 800} {
		report(fmt.Sprintf(`{"status":"RUNNING","phase":"PULLING","progress":%d,"pull_total_bytes":1000,"pull_downloaded_bytes":%d,"pull_total_layers":4,"pull_completed_layers":%d}`, 5+n/100, n, n/250))
		br.waitJS(fmt.Sprintf("%d bytes pulled", n), fmt.Sprintf(`(document.querySelector('#build-head')?.textContent || '').includes('%d B of 1000 B')`, n))
	}
	if back := eval[bool](br, `window.shown.some((v, i) => i > 0 && v < window.shown[i-1])`); back {
		t.Errorf("the page stepped back: %v", eval[[]int](br, `window.shown`))
	}
	if rr.count(a.base) < 2 || rr.count(b2.base) < 2 {
		t.Errorf("the balancer did not spread the polls: %d and %d", rr.count(a.base), rr.count(b2.base))
	}
	// The builds view lists it in progress with the same counters.
	eval[string](br, `location.hash = '#/builds', ''`)
	br.waitJS("in progress on the builds view", fmt.Sprintf(`(document.querySelector('#active-jobs tr[data-job-id=%q]')?.textContent || '').includes('800 B of 1000 B, 3/4 layers')`, jobID))
	report(`{"status":"RUNNING","phase":"UNPACKING","progress":25,"pull_total_bytes":1000,"pull_downloaded_bytes":1000,"pull_total_layers":4,"pull_completed_layers":4}`)
	br.waitJS("moved on, live", fmt.Sprintf(`(document.querySelector('#active-jobs tr[data-job-id=%q]')?.textContent || '').includes('UNPACKING')`, jobID))
	eval[string](br, fmt.Sprintf(`location.hash = '#/b/%s', ''`, jobID))
	br.waitJS("the build page again", `document.querySelector('#build-phase')?.textContent === 'UNPACKING'`)
	report(`{"status":"FAILED","phase":"UNPACKING","progress":25,"error_message":"pull registry.example/app:1: manifest unknown <script>alert(3)</script>"}`)
	br.waitJS("the failure banner", `(document.querySelector('#build-error')?.textContent || '').startsWith('Failed in UNPACKING')`)
	if e := br.text("#build-error pre"); !strings.Contains(e, "manifest unknown <script>") {
		t.Errorf("error text %q", e)
	}
	// The error's copy button, by keyboard: the clipboard takes the text,
	// or (where the browser refuses it) the text is selected.
	br.do("copy the error", chromedp.Focus(chromedp.CSS("#build-error-copy")))
	if got := eval[string](br, `document.activeElement?.tagName + ' ' + document.activeElement?.textContent`); got != "BUTTON Copy error" {
		t.Errorf("the focused element is %q, want the copy button", got)
	}
	br.do("press Enter", chromedp.KeyEvent("\r"))
	br.waitJS("copied or selected", `['Copied.', 'Selected: press Ctrl+C (⌘C) to copy.'].includes(document.querySelector('#build-error-copied')?.textContent)`)
	if got := eval[string](br, `document.querySelector('#build-error-copied').textContent === 'Copied.' ? 'copied' : window.getSelection().toString()`); got != "copied" && !strings.Contains(got, "manifest unknown <script>") {
		t.Errorf("neither copied nor selected: the selection is %q", got)
	}
	t.Logf("the copy button: %s", br.text("#build-error-copied"))
	// Without a clipboard API the text is selected instead.
	eval[bool](br, `(() => { Object.defineProperty(navigator, 'clipboard', { value: undefined, configurable: true });
		document.querySelector('#build-error-copied').textContent = ''; window.getSelection().removeAllRanges(); return true })()`)
	br.do("copy without a clipboard", chromedp.Click(chromedp.CSS("#build-error-copy")))
	br.waitJS("selected instead", `document.querySelector('#build-error-copied')?.textContent === 'Selected: press Ctrl+C (⌘C) to copy.'`)
	if got := eval[string](br, `window.getSelection().toString()`); !strings.Contains(got, "manifest unknown <script>") {
		t.Errorf("the selection is %q, want the error", got)
	}
	br.waitJS("the master's lines", `(document.querySelector('#log-lines')?.textContent || '').includes('build submitted to the data plane') && (document.querySelector('#log-lines')?.textContent || '').includes('reported the build failed')`)
	if n := eval[int](br, `document.querySelectorAll('#view script, #view img').length`); n != 0 {
		t.Errorf("%d elements came from the error text", n)
	}

	// The replica that logged them stops; the other still has the lines.
	a.stop()
	rr.set(b2.base)
	br.do("reload the build page", chromedp.Reload())
	br.waitJS("the lines from the stopped replica", `(document.querySelector('#log-lines')?.textContent || '').includes('build submitted to the data plane')`)

	// 1,000 templates: the list's first page, filtered and paged by the
	// server, rendered.
	var wg sync.WaitGroup
	ids := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				tid := fmt.Sprintf("tpl-many-%04d", i)
				body := fmt.Sprintf(`{"requestID":"req-%s","source_image_ref":"registry.example/app:1","writable_layer_size":"1Gi","template_id":%q}`, tid, tid)
				resp := call(t, http.MethodPost, b2.base+"/cube/template/from-image", body, nil)
				resp.Body.Close()
			}
		}()
	}
	for i := 0; i < 1000; i++ {
		ids <- i
	}
	close(ids)
	wg.Wait()
	eval[bool](br, `(() => { window.renderMS = undefined; const t0 = performance.now();
		new MutationObserver((_, o) => { if ((document.querySelector('#pager')?.textContent || '').includes('of 1001')) { window.renderMS = performance.now() - t0; o.disconnect(); } })
		.observe(document.querySelector('#view'), {subtree: true, childList: true, characterData: true});
		location.hash = '#/'; return true })()`)
	br.waitJS("1,001 templates listed", `window.renderMS !== undefined`)
	t.Logf("1,001 templates: first page listed and rendered in %.0f ms (server filter and page, 50 rows)", eval[float64](br, `window.renderMS`))
	if rows := eval[int](br, `document.querySelectorAll('tr[data-template-id]').length`); rows != 50 {
		t.Errorf("%d rows on the first page", rows)
	}

	if eval[string](br, `window.consoleTestMarker || ''`) != "" {
		// Reloaded on purpose above: the marker must be gone.
		t.Error("the page did not reload")
	}
	br.noProblems()
}
