package main

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
)

// secretEnv sets lathed-like secrets and a canary in the test's own
// environment (so in what a child would inherit) and returns their values.
func secretEnv(t *testing.T) []string {
	t.Helper()
	vars := map[string]string{
		"LATHE_TOKEN":           "tok-secret-redis-1",
		"LATHE_TOKEN_ALICE":     "tok-secret-redis-2",
		"AWS_ACCESS_KEY_ID":     "AKIA-secret-redis",
		"AWS_SECRET_ACCESS_KEY": "aws-secret-redis",
		"LATHE_TEST_CANARY":     "canary-secret-redis",
	}
	var vals []string
	for k, v := range vars {
		t.Setenv(k, v)
		vals = append(vals, v)
	}
	return vals
}

// requireScrubbed fails t when env holds one of the secrets, an API token
// or AWS variable by name, or lacks PATH.
func requireScrubbed(t *testing.T, what string, env, secrets []string) {
	t.Helper()
	hasPath := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LATHE_TOKEN") || strings.HasPrefix(k, "AWS_") {
			t.Errorf("%s: the environment holds %s", what, k)
		}
		for _, s := range secrets {
			if strings.Contains(kv, s) {
				t.Errorf("%s: the environment holds %q", what, kv)
			}
		}
		hasPath = hasPath || k == "PATH"
	}
	if !hasPath {
		t.Errorf("%s: no PATH in %q", what, env)
	}
}

// TestRedisServerEnvironmentIsScrubbed: the redis-server lathed up runs
// gets a minimal environment, not lathed's (API tokens, AWS secrets): the
// command as built, what a real child started by that same constructor
// (/usr/bin/env in redis-server's place) receives, and the command
// startManagedRedis really started. (redis-server's own
// /proc/PID/environ is no witness: its setproctitle writes over it.)
func TestRedisServerEnvironmentIsScrubbed(t *testing.T) {
	secrets := secretEnv(t)
	requireScrubbed(t, "redisServerCommand", redisServerCommand("/usr/bin/redis-server", []string{"--port", "0"}).Environ(), secrets)

	out, err := redisServerCommand("/usr/bin/env", nil).Output()
	if err != nil {
		t.Fatalf("env: %v", err)
	}
	requireScrubbed(t, "a child started by redisServerCommand", strings.Split(strings.TrimSpace(string(out)), "\n"), secrets)

	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed (apt-get install redis-server): %v", err)
	}
	m, err := startManagedRedis(context.Background(), t.TempDir(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if m.Embedded || m.cmd == nil {
		t.Fatal("startManagedRedis did not run redis-server")
	}
	requireScrubbed(t, "the redis-server startManagedRedis started", m.cmd.Environ(), secrets)
}
