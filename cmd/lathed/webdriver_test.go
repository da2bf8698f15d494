package main

// A small W3C WebDriver client for the dashboard's browser test: it starts
// the real chromedriver (Debian chromium-driver) on a free port and drives
// the real headless Chromium (Debian chromium) through it over HTTP. No
// stand-in: a missing browser fails the test, naming scripts/setup.sh --test.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

const (
	chromiumBin     = "/usr/bin/chromium"
	chromedriverBin = "/usr/bin/chromedriver"
	// webElementKey is the W3C key of an element reference in JSON.
	webElementKey = "element-6066-11e4-a52e-4f735466cecf"
)

// chromiumArgs are the flags the browser runs with (issue #14): headless,
// no sandbox (the tests may run as root), no GPU, no background traffic.
var chromiumArgs = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--window-size=1600,1000"}

// browserWidth is the window's width at start (chromiumArgs); resize
// changes it.
const browserWidth = 1600

// browser is one WebDriver session of headless Chromium.
type browser struct {
	base string // chromedriver's address, http://127.0.0.1:PORT
	sid  string // the session id
	hc   *http.Client
	// width is the window's width: screenshots keep it.
	width int
}

// requireChromium fails the test when chromium or chromedriver is missing.
func requireChromium(t *testing.T) {
	t.Helper()
	for _, p := range []string{chromiumBin, chromedriverBin} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s is required for the dashboard's browser test (Debian chromium and chromium-driver; scripts/setup.sh --test installs them): stat: %v", p, err)
		}
	}
}

// startBrowser starts chromedriver on a free port and opens a session; the
// session is deleted (Chromium quits) and chromedriver killed at cleanup.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	requireChromium(t)
	port := redistest.FreePort(t)
	var mu sync.Mutex
	var logs bytes.Buffer
	cmd := exec.Command(chromedriverBin, "--port="+strconv.Itoa(port))
	cmd.Stdout = syncBuf{&mu, &logs}
	cmd.Stderr = syncBuf{&mu, &logs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", chromedriverBin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("chromedriver logs:\n%s", logs.String())
			mu.Unlock()
		}
	})
	b := &browser{base: "http://127.0.0.1:" + strconv.Itoa(port), hc: &http.Client{Timeout: 60 * time.Second}, width: browserWidth}
	waitfor.NoError(t, 30*time.Second, "chromedriver ready at "+b.base, func() error {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("chromedriver exited:\n%s", logs.String())
		default:
		}
		var st struct {
			Ready   bool   `json:"ready"`
			Message string `json:"message"`
		}
		if err := b.call(http.MethodGet, "/status", nil, &st); err != nil {
			return err
		}
		if !st.Ready {
			return fmt.Errorf("not ready: %s", st.Message)
		}
		return nil
	})
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName":        "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromiumBin, "args": chromiumArgs},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(http.MethodPost, "/session", caps, &sess); err != nil {
		t.Fatalf("new WebDriver session (%s %v): %v", chromiumBin, chromiumArgs, err)
	}
	if sess.SessionID == "" {
		t.Fatalf("new WebDriver session: no session id in the answer")
	}
	b.sid = sess.SessionID
	t.Cleanup(func() {
		if err := b.call(http.MethodDelete, "/session/"+b.sid, nil, nil); err != nil {
			t.Errorf("delete WebDriver session: %v", err)
		}
	})
	return b
}

// call sends one WebDriver command and decodes the answer's "value" into
// out (nil: ignored). A WebDriver error comes back as an error.
func (b *browser) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("webdriver %s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: read answer: %w", method, path, err)
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("webdriver %s %s: %s: answer is not JSON: %w: %.300s", method, path, resp.Status, err, raw)
	}
	if resp.StatusCode != http.StatusOK {
		var we struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(env.Value, &we)
		return fmt.Errorf("webdriver %s %s: %s: %s: %s", method, path, resp.Status, we.Error, we.Message)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(env.Value, out); err != nil {
		return fmt.Errorf("webdriver %s %s: decode value: %w: %.300s", method, path, err, env.Value)
	}
	return nil
}

func (b *browser) session(path string) string { return "/session/" + b.sid + path }

// navigate opens url and waits until the page has loaded (WebDriver's
// default page load strategy).
func (b *browser) navigate(t *testing.T, url string) {
	t.Helper()
	if err := b.call(http.MethodPost, b.session("/url"), map[string]string{"url": url}, nil); err != nil {
		t.Fatalf("navigate to %s: %v", url, err)
	}
}

// exec runs script (a function body; arguments as `arguments[i]`) in the
// page and decodes what it returns into out.
func (b *browser) exec(script string, out any, args ...any) error {
	if args == nil {
		args = []any{}
	}
	return b.call(http.MethodPost, b.session("/execute/sync"), map[string]any{"script": script, "args": args}, out)
}

// execAsync runs script asynchronously (WebDriver's Execute Async Script:
// it ends by calling its last argument with the result) and decodes that
// result into out.
func (b *browser) execAsync(script string, out any, args ...any) error {
	if args == nil {
		args = []any{}
	}
	return b.call(http.MethodPost, b.session("/execute/async"), map[string]any{"script": script, "args": args}, out)
}

// text finds the first element matching the CSS selector and returns its
// rendered text (WebDriver's Get Element Text).
func (b *browser) text(css string) (string, error) {
	var ref map[string]string
	if err := b.call(http.MethodPost, b.session("/element"), map[string]string{"using": "css selector", "value": css}, &ref); err != nil {
		return "", err
	}
	id := ref[webElementKey]
	if id == "" {
		return "", fmt.Errorf("find %q: no element reference in %v", css, ref)
	}
	var s string
	if err := b.call(http.MethodGet, b.session("/element/"+id+"/text"), nil, &s); err != nil {
		return "", err
	}
	return s, nil
}

// resize sets the window's outer size to width×height and waits until
// the page's viewport is width wide (headless Chromium has no window
// frame, so its outer and inner widths agree).
func (b *browser) resize(t *testing.T, width, height int) {
	t.Helper()
	if err := b.call(http.MethodPost, b.session("/window/rect"), map[string]int{"width": width, "height": height}, nil); err != nil {
		t.Fatalf("resize the window to %dx%d: %v", width, height, err)
	}
	b.width = width
	waitfor.Value(t, 10*time.Second, fmt.Sprintf("the page's viewport %d px wide", width), func() int {
		var w int
		if err := b.exec(`return document.documentElement.clientWidth + (window.innerWidth - document.documentElement.clientWidth);`, &w); err != nil {
			t.Fatalf("read the viewport's width: %v", err)
		}
		return w
	}, func(w int) bool { return w == width })
}

// screenshot grows the window to the page's full height at its width (so
// the whole page is in the picture), takes a PNG and writes it to each
// path.
func (b *browser) screenshot(t *testing.T, paths ...string) {
	t.Helper()
	var size struct{ W, H, Chrome int }
	if err := b.exec(`return {W: arguments[0], H: document.documentElement.scrollHeight, Chrome: window.outerHeight - window.innerHeight};`, &size, b.width); err != nil {
		t.Fatalf("page height: %v", err)
	}
	if err := b.call(http.MethodPost, b.session("/window/rect"), map[string]int{"width": size.W, "height": size.H + size.Chrome}, nil); err != nil {
		t.Fatalf("resize the window to %dx%d: %v", size.W, size.H+size.Chrome, err)
	}
	var b64 string
	if err := b.call(http.MethodGet, b.session("/screenshot"), nil, &b64); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("screenshot: not base64: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot: want a PNG, got %d bytes starting %q", len(png), png[:min(8, len(png))])
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatalf("save the screenshot: %v", err)
		}
		t.Logf("screenshot (%d bytes) saved to %s", len(png), p)
	}
}
