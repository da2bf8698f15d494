package main

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/scheduler/plane"
)

// TestComposeConfigTokens: the compose daemon config (configs/compose.yaml)
// loads with both of its tokens set, the admin's and Prometheus' viewer
// token (LATHE_METRICS_TOKEN), and refuses to start without the latter, as
// docker-compose.yml's comment says.
func TestComposeConfigTokens(t *testing.T) {
	env := map[string]string{"LATHE_ADMIN_TOKEN": "admin-secret-0123456789", "LATHE_METRICS_TOKEN": "viewer-secret-0123456789"}
	tokens, err := loadAuth("../../configs/compose.yaml", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]plane.Role{}
	for _, tk := range tokens {
		roles[tk.Secret] = tk.Role
	}
	if roles["viewer-secret-0123456789"] != plane.RoleViewer || roles["admin-secret-0123456789"] != plane.RoleAdmin {
		t.Fatalf("configs/compose.yaml's tokens: %v, want LATHE_METRICS_TOKEN a viewer's and LATHE_ADMIN_TOKEN an admin's", roles)
	}
	delete(env, "LATHE_METRICS_TOKEN")
	if _, err := loadAuth("../../configs/compose.yaml", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "LATHE_METRICS_TOKEN") {
		t.Fatalf("without LATHE_METRICS_TOKEN: %v, want an error naming it", err)
	}
}
