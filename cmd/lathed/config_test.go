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
