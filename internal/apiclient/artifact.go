package apiclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Artifact downloads the job's artifact name into w and returns the hex
// SHA-256 of the bytes written. The answer's headers must arrive within
// RequestTimeout; the body may take as long as it takes. When the scheduler
// sends X-Lathe-SHA256 and the bytes do not match it, the error wraps
// ErrChecksum. Callers that need the bytes only when they verify should
// write to a temporary file and compare the returned sum with the Job's
// artifact list before keeping it.
func (c *Client) Artifact(ctx context.Context, id, name string, w io.Writer) (string, error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := c.newRequest(hctx, http.MethodGet, jobPath(id, "/artifacts/"+url.PathEscape(name)), nil, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/octet-stream")
	timer := time.AfterFunc(c.requestTimeout, cancel)
	resp, err := c.send(ctx, req)
	timer.Stop()
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), resp.Body); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("apiclient: artifact %s/%s: %w", id, name, ctx.Err())
		}
		return "", fmt.Errorf("apiclient: artifact %s/%s: %w", id, name, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want := strings.TrimSpace(resp.Header.Get("X-Lathe-SHA256")); want != "" && !strings.EqualFold(want, sum) {
		return sum, fmt.Errorf("apiclient: artifact %s/%s: %w: got %s, scheduler announced %s", id, name, ErrChecksum, sum, want)
	}
	return sum, nil
}
