package mototest

import (
	"net"
	"os"
	"testing"
)

// TestListensOn: the port-ownership check Start uses to tell its own
// moto_server from another process on the same port.
func TestListensOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if owns, known := listensOn(os.Getpid(), port); !known || !owns {
		t.Fatalf("own listener: owns=%v known=%v", owns, known)
	}
	srv := Start(t)
	if owns, known := listensOn(srv.cmd.Process.Pid, port); !known || owns {
		t.Fatalf("moto_server on our port: owns=%v known=%v", owns, known)
	}
	_, motoPort, _ := net.SplitHostPort(srv.addr)
	p, _ := net.LookupPort("tcp", motoPort)
	if owns, _ := listensOn(srv.cmd.Process.Pid, p); !owns {
		t.Fatalf("moto_server does not own %s", srv.addr)
	}
}
