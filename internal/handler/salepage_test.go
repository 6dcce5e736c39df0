package handler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
)

// browser starts headless Chromium for one test, or skips it where there is none — unless the
// backends are required, and then a missing browser fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		path, err = exec.LookPath("chromium-browser")
	}
	if err != nil {
		if backendtest.Required() {
			t.Fatal("no chromium on PATH, and SECKILL_TEST_REQUIRE_BACKENDS=1: apt-get install -y chromium")
		}
		t.Skip("no chromium on PATH: apt-get install -y chromium to run the sale page in a browser")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(900, 820))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	return ctx
}

// tab is one browser tab, and what went wrong on its pages: script exceptions, console errors,
// resources that failed to load.
type tab struct {
	context.Context
	mu     sync.Mutex
	errors []string
}

// newTab opens a tab; skew moves its clock (Date) that far from the machine's.
func newTab(t *testing.T, browser context.Context, skew time.Duration) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	tb := &tab{Context: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				tb.mu.Lock()
				tb.errors = append(tb.errors, m.String()+" "+m.URL)
				tb.mu.Unlock()
			}
		}
	}()
	_, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	require.NoError(t, err)
	if skew != 0 {
		// A browser whose clock is off: every Date the page makes, and Date.now, are skew away.
		script := fmt.Sprintf(`(() => {
  const skew = %d, Real = Date;
  class Skewed extends Real {
    constructor(...a) { if (a.length === 0) { super(Real.now() + skew); } else { super(...a); } }
    static now() { return Real.now() + skew; }
  }
  window.Date = Skewed;
})();`, skew.Milliseconds())
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
		require.NoError(t, err)
	}
	return tb
}

// noErrors asserts that the tab's pages logged no error so far.
func (tb *tab) noErrors(t *testing.T) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	assert.Empty(t, tb.errors, "the page logged errors")
}

// js is the value of the script expression expr in the tab's page.
func js[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tb, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// until waits, in the page, for the script expression cond to hold; it returns when it did.
func (tb *tab) until(t *testing.T, cond string, within time.Duration, why string) time.Time {
	t.Helper()
	_, err := chromedp.Run(tb, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(10*time.Millisecond),
		chromedp.WithPollingTimeout(within)))
	if err != nil {
		text, _ := chromedp.Run(tb, chromedp.Evaluate[string](`document.body.innerText`))
		require.NoError(t, err, "%s: %s did not hold within %s; the page reads:\n%s", why, cond, within, text)
	}
	return time.Now()
}

// live is a server of one instance, as a browser reaches it.
func live(t *testing.T, s *server) string {
	t.Helper()
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSalePageInBrowser runs the sale page in headless Chromium against two instances on the
// real backends: the page loads with no error; its countdown opens the button at the server's
// start though the browser's clock is an hour ahead; a buyer joins the waiting room, is
// admitted, buys and reads its order; a page on the other instance sees the stock fall within a
// second of each sale made through the first, and says sold out when the last unit goes.
func TestSalePageInBrowser(t *testing.T) {
	ctx := browser(t)
	a, b := newServer(t), newServer(t)
	urlA, urlB := live(t, a), live(t, b)
	sku := backendtest.SKU(t)
	starts := time.Now().Add(3 * time.Second).UTC()
	rec := a.do(t, http.MethodPut, productPath(sku), fmt.Sprintf(
		`{"name":"Flash sale","stock":3,"starts_at":%q,"waiting_room":{"admit_per_s":50}}`, starts.Format(time.RFC3339Nano)), admin)
	require.Equal(t, http.StatusOK, rec.Code, "body: %s", rec.Body)

	// A browser an hour ahead would open the button at once on its own clock.
	buyer := newTab(t, ctx, time.Hour)
	require.NoError(t, chromedp.Do(buyer, chromedp.Navigate(urlA+"/sale/"+sku)))
	assert.Equal(t, "Flash sale", js[string](t, buyer, `document.querySelector("h1").textContent`))
	opened := buyer.until(t, `!document.getElementById("act").disabled`, 10*time.Second, "the button opens at the start")
	// The page takes the server's time as it was written, so it opens a little late, never early.
	assert.False(t, opened.Before(starts), "the button opened %s before the server's start: the countdown ran on the browser's clock",
		starts.Sub(opened))
	assert.Less(t, opened.Sub(starts), 2*time.Second, "the button opened long after the start")

	require.NoError(t, chromedp.Do(buyer, chromedp.SendKeys(chromedp.CSS("#buyer"), "ada"), chromedp.Click(chromedp.CSS("#act"))))
	buyer.until(t, `document.getElementById("act").textContent === "Buy" && !document.getElementById("act").disabled`,
		10*time.Second, "the buyer is admitted and offered to buy")
	require.NoError(t, chromedp.Do(buyer, chromedp.Click(chromedp.CSS("#act"))))
	buyer.until(t, `document.getElementById("order-status").dataset.status === "confirmed"`, 10*time.Second, "the order reads confirmed")
	buyer.until(t, `document.getElementById("stock").textContent === "2"`, 2*time.Second, "the buyer's page counts its own sale")
	// A picture of a sale in progress, when asked for: docs/sale-page.png is made this way.
	if path := backendtest.Screenshot(); path != "" {
		png, err := chromedp.Run(buyer, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}

	// A watcher on the other instance; the sales go through the first.
	watcher := newTab(t, ctx, 0)
	require.NoError(t, chromedp.Do(watcher, chromedp.Navigate(urlB+"/sale/"+sku)))
	watcher.until(t, `document.getElementById("stock").textContent === "2"`, 2*time.Second, "the watcher's page loads the figures")
	for i, left := range []string{"1", "0"} {
		pass := admitted(t, a, sku, fmt.Sprintf("u-%d", i))
		rec := a.do(t, http.MethodPost, ordersPath(sku), fmt.Sprintf(`{"user_id":"u-%d"}`, i), header{"Seckill-Pass": pass})
		require.Equal(t, http.StatusCreated, rec.Code, "body: %s", rec.Body)
		sold := time.Now()
		seen := watcher.until(t, `document.getElementById("stock").textContent === "`+left+`"`, 3*time.Second,
			"the other instance's page shows the sale")
		assert.Less(t, seen.Sub(sold), time.Second, "the other instance's page showed the sale %s after it", seen.Sub(sold))
	}
	watcher.until(t, `document.getElementById("sale").dataset.state === "sold_out"`, time.Second, "sold out is shown")
	assert.Equal(t, "Sold out", js[string](t, watcher, `document.getElementById("state").textContent`))
	assert.Contains(t, js[string](t, watcher, `document.getElementById("message").textContent`), "Sold out")
	assert.True(t, js[bool](t, watcher, `document.getElementById("act").disabled`), "no button to press when sold out")
	buyer.noErrors(t)
	watcher.noErrors(t)
}

// admitted joins sku's waiting room as user through s and polls until admitted: the pass.
func admitted(t *testing.T, s *server, sku, user string) string {
	t.Helper()
	rec := s.do(t, http.MethodPost, productPath(sku)+"/queue", `{"user_id":"`+user+`"}`, nil)
	require.Equal(t, http.StatusAccepted, rec.Code, "body: %s", rec.Body)
	loc := rec.Header().Get("Location")
	var pass string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rec := s.do(t, http.MethodGet, loc+"?user_id="+user, "", nil)
		body := rec.Body.String()
		require.Equal(c, http.StatusOK, rec.Code, "body: %s", body)
		_, after, ok := strings.Cut(body, `"pass":"`)
		require.True(c, ok, "not admitted yet: %s", body)
		pass, _, _ = strings.Cut(after, `"`)
	}, 10*time.Second, 50*time.Millisecond)
	return pass
}

// TestSalePage: the page says the product's static facts without its script — name, units
// left, state, start — asks a name where buyers are not authenticated and a token where they
// are, and an unknown product is a 404 page.
func TestSalePage(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	starts := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	rec := s.do(t, http.MethodPut, productPath(sku), fmt.Sprintf(`{"name":"Flash <sale>","stock":7,"starts_at":%q}`,
		starts.Format(time.RFC3339)), admin)
	require.Equal(t, http.StatusOK, rec.Code, "body: %s", rec.Body)
	rec = s.do(t, http.MethodGet, "/sale/"+sku, "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	page := rec.Body.String()
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	assert.Contains(t, page, "<h1>Flash &lt;sale&gt;</h1>", "the name, escaped")
	assert.Contains(t, page, `<span id="stock">7</span> of 7 left`)
	assert.Contains(t, page, "Not on sale yet")
	assert.Contains(t, page, starts.Format(time.RFC1123))
	assert.Contains(t, page, `id="buyer"`, "without buyer identity the page asks a name")
	assert.NotContains(t, page, "http://", "no third-party host")
	assert.NotContains(t, page, "https://", "no third-party host")

	is := newIssuer(t)
	authed := identityServer(t, is)
	rec = authed.do(t, http.MethodGet, "/sale/"+sku, "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `id="token"`, "with buyer identity the page takes a token")

	rec = s.do(t, http.MethodGet, "/sale/"+backendtest.SKU(t), "", nil)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Body.String(), "No product")
}
