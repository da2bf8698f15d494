package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The bounds of apiclient (its DialTimeout, RequestTimeout and the most of
// an answer it reads).
const (
	dialTimeout    = 2 * time.Second
	requestTimeout = 10 * time.Second
	maxAnswer      = 64 << 20
)

// errAnswer is an answer that is not HTTP/1.x as the front reads it.
var errAnswer = errors.New("malformed HTTP answer")

// post sends one HTTP/1.1 POST of body to base's path + path, with the
// header lines hdr, over a connection of its own, and returns the status
// and the answer's body (Content-Length, chunked, or up to the close).
// This is the one HTTP exchange the front makes; net/http would cost more
// at start-up than the rest of the program together.
func post(base *url.URL, path string, hdr []string, body []byte) (int, []byte, error) {
	host := base.Host
	addr := host
	if base.Port() == "" {
		addr = net.JoinHostPort(base.Hostname(), "80")
	}
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return 0, nil, err
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: lathe\r\nContent-Length: %d\r\nConnection: close\r\n",
		strings.TrimRight(base.EscapedPath(), "/"), path, host, len(body))
	for _, h := range hdr {
		req.WriteString(h)
		req.WriteString("\r\n")
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return 0, nil, err
	}
	return readAnswer(bufio.NewReader(conn))
}

// readAnswer reads an HTTP/1.x answer: its status and body.
func readAnswer(r *bufio.Reader) (int, []byte, error) {
	line, err := readLine(r)
	if err != nil {
		return 0, nil, err
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
		return 0, nil, errAnswer
	}
	length, chunked, err := readHeader(r)
	if err != nil {
		return 0, nil, err
	}
	if status < 200 {
		return 0, nil, errAnswer // 1xx: the front sends no Expect; not an answer it reads
	}
	var body []byte
	switch {
	case chunked:
		body, err = readChunked(r)
	case length > maxAnswer:
		err = errAnswer
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	default:
		body, err = io.ReadAll(io.LimitReader(r, maxAnswer+1))
		if err == nil && len(body) > maxAnswer {
			err = errAnswer
		}
	}
	if err != nil {
		return 0, nil, err
	}
	return status, body, nil
}

// readHeader reads an answer's header lines, up to the blank line, for
// how its body is delimited: length (-1: none given) or chunked.
func readHeader(r *bufio.Reader) (length int64, chunked bool, err error) {
	length = -1
	for {
		line, err := readLine(r)
		if err != nil {
			return 0, false, err
		}
		if line == "" {
			return length, chunked, nil
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return 0, false, errAnswer
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			if length, err = strconv.ParseInt(value, 10, 64); err != nil || length < 0 {
				return 0, false, errAnswer
			}
		case "transfer-encoding":
			if chunked = strings.EqualFold(value, "chunked"); !chunked {
				return 0, false, errAnswer
			}
		}
	}
}

// readChunked reads a chunked body and its trailer.
func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 || int64(len(body))+n > maxAnswer {
			return nil, errAnswer
		}
		if n == 0 {
			for { // the trailer, up to its blank line
				if line, err = readLine(r); err != nil || line == "" {
					return body, err
				}
			}
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, err
		}
		if line, err = readLine(r); err != nil || line != "" {
			return nil, errAnswer
		}
	}
}

// readLine reads one CRLF- (or LF-) ended line of at most 64 KiB, without
// its end.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		frag, more, err := r.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		b = append(b, frag...)
		if len(b) > 64<<10 {
			return "", errAnswer
		}
		if !more {
			return string(b), nil
		}
	}
}
