// Package mototest starts moto_server for tests: a fake AWS (an emulator of
// the EC2, S3 and IAM APIs written in Python, not AWS itself) in its own
// process on a free loopback port. Tests drive it with the real
// aws-sdk-go-v2 clients. A test that needs it fails (never skips) when
// moto_server is missing, so CI cannot pass without it.
//
// What moto does not do: it starts no virtual machines, never changes an
// instance's state by itself, ignores RunInstances' ClientToken, and never
// runs out of capacity. Tests that need those behaviours put a proxy in
// front of it or play the instance's part themselves.
package mototest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Region is the region every Config from this package uses.
const Region = "eu-central-1"

// Server is one moto_server child process, the fake AWS of a test.
type Server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	tb   testing.TB
}

// Binary returns the path of moto_server: the one on PATH, else the first
// under /root/.pyenv/versions/*/bin. It returns an error naming both places
// when there is none.
func Binary() (string, error) {
	if p, err := exec.LookPath("moto_server"); err == nil {
		// A pyenv shim on PATH may point at a version without moto;
		// prefer a real install when the shim fails to run.
		if !isShim(p) {
			return p, nil
		}
	}
	matches, _ := filepath.Glob("/root/.pyenv/versions/*/bin/moto_server")
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && !fi.IsDir() {
			return m, nil
		}
	}
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("moto_server is neither on PATH nor under /root/.pyenv/versions/*/bin (pip install 'moto[server]==5.2.*')")
}

func isShim(p string) bool {
	return filepath.Base(filepath.Dir(p)) == "shims"
}

// Start launches moto_server on a free loopback port, waits until it answers
// and kills it at test cleanup. It calls tb.Fatal when moto_server is
// missing or does not come up. Should another process take the port first,
// it starts again on another port (three tries).
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatalf("mototest: %v", err)
	}
	for try := 1; ; try++ {
		s, err := start(tb, bin)
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || try == 3 {
			tb.Fatalf("mototest: %v", err)
		}
		tb.Logf("mototest: %v; trying another port", err)
	}
}

var errPortTaken = errors.New("port taken by another process")

func start(tb testing.TB, bin string) (*Server, error) {
	tb.Helper()
	dir := tb.TempDir()
	port := freePort(tb)
	s := &Server{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, tb: tb, done: make(chan struct{})}
	logPath := filepath.Join(dir, "moto.log")
	if err := s.launch(bin, port, logPath); err != nil {
		return nil, err
	}
	tb.Cleanup(s.kill)
	if err := s.waitUp(port, logPath); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts moto_server (bin) on port, in s.dir, its output to logPath;
// s.done is closed when it exits.
func (s *Server) launch(bin string, port int, logPath string) error {
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Dir = s.dir
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	return nil
}

// waitUp waits up to a minute for the server s.launch started to answer on
// port. The error wraps errPortTaken when another process held the port.
func (s *Server) waitUp(port int, logPath string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(s.URL() + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			// The port was free a moment ago; make sure the server that
			// answered is ours, not another test's that took the port.
			owns, known := listensOn(s.cmd.Process.Pid, port)
			if owns || !known {
				return nil
			}
			err = fmt.Errorf("%s answered by another process", s.addr)
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			if strings.Contains(string(log), "Address already in use") {
				return fmt.Errorf("moto_server on %s: %w", s.addr, errPortTaken)
			}
			return fmt.Errorf("moto_server exited before answering on %s:\n%s", s.addr, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("moto_server on %s did not answer: %v\n%s", s.addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.addr }

// Config returns an aws.Config for the server: static credentials
// "test"/"test", region eu-central-1, BaseEndpoint set to URL. S3 clients
// built from it must set UsePathStyle (moto on a bare IP cannot serve
// virtual-hosted buckets); see S3PathStyle.
func (s *Server) Config(ctx context.Context) aws.Config {
	s.tb.Helper()
	return ConfigFor(ctx, s.tb, s.URL())
}

// ConfigFor is Config for any endpoint (a proxy in front of the server).
func ConfigFor(ctx context.Context, tb testing.TB, endpoint string) aws.Config {
	tb.Helper()
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithBaseEndpoint(endpoint),
		// moto sends no response checksums; only validate when an API requires it.
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		// Keep the developer's ~/.aws and AWS_PROFILE out of tests.
		config.WithSharedConfigFiles([]string{}),
		config.WithSharedCredentialsFiles([]string{}),
	)
	if err != nil {
		tb.Fatalf("mototest: aws config: %v", err)
	}
	return cfg
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// listensOn reports whether process pid holds a listening TCP socket on
// port (from /proc); known is false where /proc cannot tell.
func listensOn(pid, port int) (owns, known bool) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			if p, err := strconv.ParseInt(fields[1][i+1:], 16, 32); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil || len(inodes) == 0 {
		return false, false
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
			return true, true
		}
	}
	return false, true
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("mototest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// S3PathStyle is an s3.Options function that turns on path-style addressing,
// which moto on 127.0.0.1 needs: s3.NewFromConfig(cfg, mototest.S3PathStyle).
func S3PathStyle(o *s3.Options) { o.UsePathStyle = true }
