// Package apiclient is a small typed client for the Lathe scheduler's HTTP
// API (docs/api.md). It is what the lathe CLI uses; it never talks to Redis.
//
// Every non-streaming call is bounded by RequestTimeout; streaming calls
// (Follow, Artifact) have no overall timeout and end when the caller's
// context does. Failures are reported in two shapes callers can branch on:
// an *APIError when the scheduler answered with an error status, and an
// error matching ErrUnreachable (errors.Is) when no answer came at all.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

const (
	// DialTimeout bounds opening a TCP connection to the scheduler when New
	// builds its own http.Client.
	DialTimeout = 2 * time.Second
	// RequestTimeout bounds each non-streaming call, from sending the
	// request to reading the whole answer.
	RequestTimeout = 10 * time.Second
	// maxJSONBody caps a JSON answer the client reads.
	maxJSONBody = 64 << 20
)

// Client calls one scheduler. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[:port][/prefix], no trailing slash
	token string
	hc    *http.Client

	requestTimeout time.Duration
	// followRetries is how many times in a row Follow reconnects after a
	// dropped stream before it gives up; a received event resets the count.
	followRetries int
	// followBackoff is the first wait before a reconnect; it doubles up to
	// 8× and is zero in tests.
	followBackoff time.Duration
}

// New returns a client for the scheduler at baseURL (for example
// "http://127.0.0.1:8080"). A non-empty token is sent as
// "Authorization: Bearer <token>". A nil httpClient means a client with a
// DialTimeout dial timeout and no overall timeout; a caller-supplied client
// should have no Timeout either, since Follow and Artifact stream for as
// long as the job or the file takes.
func New(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Transport: DefaultTransport()}
	}
	return &Client{
		base:           strings.TrimRight(baseURL, "/"),
		token:          token,
		hc:             httpClient,
		requestTimeout: RequestTimeout,
		followRetries:  5,
		followBackoff:  250 * time.Millisecond,
	}
}

// DefaultTransport is the transport a Client uses when given no HTTP
// client: http.DefaultTransport's, with DialTimeout to connect.
func DefaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = DialTimeout * 5
	return t
}

// BaseURL returns the scheduler address the client calls.
func (c *Client) BaseURL() string { return c.base }

// newRequest builds a request for path (which starts with "/") and query q.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, fmt.Errorf("apiclient: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send performs req. A transport failure is returned as ErrUnreachable unless
// the caller's own context (parent) ended first, in which case its error is
// returned. An error status is returned as *APIError, with the body closed,
// unless it is one of also (an answer the endpoint documents as a result,
// like audit/verify's 409).
func (c *Client) send(parent context.Context, req *http.Request, also ...int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if perr := parent.Err(); perr != nil {
			return nil, fmt.Errorf("apiclient: %s %s: %w", req.Method, req.URL.Path, perr)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if (resp.StatusCode < 200 || resp.StatusCode > 299) && !slices.Contains(also, resp.StatusCode) {
		defer resp.Body.Close()
		return nil, decodeAPIError(resp)
	}
	return resp, nil
}

// call performs one non-streaming JSON call bounded by the request timeout
// and decodes a 2xx answer into out (when out is non-nil).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, body []byte, hdr http.Header, out any) error {
	_, err := c.callStatus(ctx, method, path, q, body, hdr, nil, out)
	return err
}

// callStatus is call that also decodes the answers of the statuses in also
// into out (instead of making them an *APIError), and returns the status.
func (c *Client) callStatus(ctx context.Context, method, path string, q url.Values, body []byte, hdr http.Header, also []int, out any) (int, error) {
	tctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	req, err := c.newRequest(tctx, method, path, q, body)
	if err != nil {
		return 0, err
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.send(ctx, req, also...)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		if ctx.Err() != nil {
			return resp.StatusCode, fmt.Errorf("apiclient: %s %s: %w", method, path, ctx.Err())
		}
		return resp.StatusCode, fmt.Errorf("%w: %s %s: reading the answer: %w", ErrUnreachable, method, path, err)
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("apiclient: %s %s: decoding the answer: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// jobPath returns /api/v1/jobs/<id><suffix> with id escaped.
func jobPath(id, suffix string) string {
	return "/api/v1/jobs/" + url.PathEscape(id) + suffix
}
