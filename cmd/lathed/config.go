package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
)

// fileConfig is the daemon's config file (configs/lathe.yaml documents
// every key). Flags given on the command line win over the file.
type fileConfig struct {
	DataDir   string              `yaml:"data_dir"`
	Redis     redisSection        `yaml:"redis"`
	Scheduler schedulerSection    `yaml:"scheduler"`
	Worker    workerSection       `yaml:"worker"`
	Jobs      jobsSection         `yaml:"jobs"`
	Routing   routingSection      `yaml:"routing"`
	Trainers  map[string][]string `yaml:"trainers"`
}

// The sections are named types so an unknown key reads "field X not found
// in type main.workerSection".
type redisSection struct {
	URL       string `yaml:"url"`
	KeyPrefix string `yaml:"key_prefix"`
}

type schedulerSection struct {
	Listen        string   `yaml:"listen"`
	PlaceInterval duration `yaml:"place_interval"`
	RepairAfter   duration `yaml:"repair_after"`
	ReapGrace     duration `yaml:"reap_grace"`
}

type workerSection struct {
	Node              string   `yaml:"node"`
	Slots             int      `yaml:"slots"`
	MaxAttempts       int      `yaml:"max_attempts"`
	KillGrace         duration `yaml:"kill_grace"`
	HeartbeatTTL      duration `yaml:"heartbeat_ttl"`
	TaskCheckInterval duration `yaml:"task_check_interval"`
	LeaseTTL          duration `yaml:"lease_ttl"`
}

type jobsSection struct {
	DefaultMaxRuntime duration `yaml:"default_max_runtime"`
	DefaultOutputURI  string   `yaml:"default_output_uri"`
	EventsMaxLen      int64    `yaml:"events_max_len"`
}

type routingSection struct {
	DefaultResidency []string `yaml:"default_residency"`
}

// duration reads "10s", "2h" from YAML.
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration like 10s or 2h", n.Line, n.Value)
	}
	*d = duration(v)
	return nil
}

func (d duration) D() time.Duration { return time.Duration(d) }

// loadConfig reads path ("" = no file: all defaults). Unknown keys are errors.
func loadConfig(path string) (*fileConfig, error) {
	c := &fileConfig{}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if c.DataDir != "" && !filepath.IsAbs(c.DataDir) {
		c.DataDir = filepath.Join(filepath.Dir(path), c.DataDir)
	}
	for i, tag := range c.Routing.DefaultResidency {
		if !jobspec.ValidResidencyTag(tag) {
			return nil, fmt.Errorf("config %s: routing.default_residency[%d] = %q: must be a lower-case word", path, i, tag)
		}
	}
	if u := c.Jobs.DefaultOutputURI; u != "" {
		if _, err := fileuri.Path(u); err != nil {
			return nil, fmt.Errorf("config %s: jobs.default_output_uri: %w", path, err)
		}
	}
	for name, argv := range c.Trainers {
		if len(argv) == 0 {
			return nil, fmt.Errorf("config %s: trainers.%s: empty command", path, name)
		}
	}
	return c, nil
}
