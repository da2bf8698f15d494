//go:build !linux

package main

// hardenProcess does nothing off Linux (see harden_linux.go).
func hardenProcess() error { return nil }
