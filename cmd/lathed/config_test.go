package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shipped example config must load, and say what the defaults are.
func TestExampleConfigLoads(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "configs", "lathe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Scheduler.Listen != "127.0.0.1:8080" || c.Worker.Slots != 2 || c.Worker.KillGrace.D() != 10*time.Second ||
		c.Jobs.DefaultMaxRuntime.D() != 24*time.Hour || len(c.Routing.DefaultResidency) != 1 || c.Routing.DefaultResidency[0] != "onprem" {
		t.Fatalf("example config: %+v", c)
	}
	if argv := c.Trainers["reference"]; len(argv) != 2 || argv[0] != "/usr/bin/python3" {
		t.Fatalf("reference trainer %v", argv)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key":   "worker:\n  slotz: 3\n",
		"bad duration":  "worker:\n  kill_grace: soon\n",
		"empty trainer": "trainers:\n  mine: []\n",
		"bad residency": "routing:\n  default_residency: [OnPrem]\n",
		"s3 output":     "jobs:\n  default_output_uri: s3://b/p\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := loadConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	p := filepath.Join(dir, "empty.yaml")
	os.WriteFile(p, nil, 0o644)
	if _, err := loadConfig(p); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(f, []byte("tokens:\n  - {name: bob, token: bob-secret-0123456789, role: submitter, team: b}\n"), 0o600)
	env := map[string]string{"ALICE_TOKEN": "alice-secret-0123456789"}
	toks, err := loadTokens(authSection{
		Tokens:     []tokenEntry{{Name: "alice", TokenEnv: "ALICE_TOKEN", Role: "admin", Team: "a"}},
		TokensFile: f,
	}, func(k string) string { return env[k] })
	if err != nil || len(toks) != 2 || toks[0].Secret != "alice-secret-0123456789" || toks[1].Name != "bob" {
		t.Fatalf("tokens %+v, %v", toks, err)
	}
	if _, err := loadTokens(authSection{Tokens: []tokenEntry{{Name: "x", TokenEnv: "UNSET_VAR", Role: "admin", Team: "a"}}}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "UNSET_VAR") {
		t.Fatalf("unset token_env: %v", err)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true, "127.0.0.2:9": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "example.com:80": false, "bad": false} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v", addr, got)
		}
	}
}
