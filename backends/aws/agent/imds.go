package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// DefaultIMDSEndpoint is EC2's instance metadata service.
const DefaultIMDSEndpoint = "http://169.254.169.254"

// imdsTokenTTL is the lifetime asked for each IMDSv2 session token; a token
// is renewed when less than a minute of it is left.
const imdsTokenTTL = 6 * time.Hour

// SpotNotice is a spot interruption notice from IMDS.
type SpotNotice struct {
	// Action is "terminate", "stop" or "hibernate".
	Action string `json:"action"`
	// Time is when EC2 will act, as EC2 wrote it (UTC, RFC 3339).
	Time string `json:"time"`
}

// imdsClient polls /latest/meta-data/spot/instance-action with IMDSv2.
type imdsClient struct {
	base   string
	hc     *http.Client
	token  string
	expiry time.Time
}

func newIMDSClient(base string) *imdsClient {
	return &imdsClient{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Timeout: 2 * time.Second}}
}

// fetchToken gets a fresh session token.
func (c *imdsClient) fetchToken(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/latest/api/token", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", fmt.Sprint(int(imdsTokenTTL/time.Second)))
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("imds token: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("imds token: HTTP %d", resp.StatusCode)
	}
	c.token, c.expiry = strings.TrimSpace(string(b)), time.Now().Add(imdsTokenTTL)
	return nil
}

// notice returns the spot interruption notice, or nil when there is none
// (404).
func (c *imdsClient) notice(ctx context.Context) (*SpotNotice, error) {
	for try := 0; try < 2; try++ {
		if c.token == "" || time.Until(c.expiry) < time.Minute {
			if err := c.fetchToken(ctx); err != nil {
				return nil, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/latest/meta-data/spot/instance-action", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-aws-ec2-metadata-token", c.token)
		resp, err := c.hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("imds instance-action: %w", err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			var n SpotNotice
			if err := json.Unmarshal(b, &n); err != nil {
				return nil, fmt.Errorf("imds instance-action: bad JSON %q: %w", b, err)
			}
			return &n, nil
		case http.StatusNotFound:
			return nil, nil
		case http.StatusUnauthorized:
			c.token = "" // expired or revoked: one more try with a new one
			continue
		default:
			return nil, fmt.Errorf("imds instance-action: HTTP %d", resp.StatusCode)
		}
	}
	return nil, fmt.Errorf("imds instance-action: token refused twice")
}

// watchSpot polls IMDS every interval until ctx is done, and calls onNotice
// once with the first notice. Errors are logged (the first, then every
// tenth), never fatal: without IMDS the attempt runs on.
func watchSpot(ctx context.Context, base string, interval time.Duration, log *slog.Logger, onNotice func(SpotNotice)) {
	c := newIMDSClient(base)
	t := time.NewTicker(interval)
	defer t.Stop()
	fails := 0
	for {
		n, err := c.notice(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if fails%10 == 0 {
				log.Warn("cannot read the spot interruption notice from IMDS", slog.Any("error", err), slog.Int("failures", fails+1))
			}
			fails++
		case n != nil:
			onNotice(*n)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
