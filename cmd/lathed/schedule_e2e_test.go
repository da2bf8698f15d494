package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigSchedules: the schedules: section loads with its files
// resolved against the config's folder; an unknown key, a bad field and a
// missing file are errors naming the schedule.
func TestConfigSchedules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(`{"name":"n","base_model":"tiny-char","dataset":"file:///d"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(dir, "lathe.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("schedules:\n  - {name: nightly-lr, cron: \"0 2 * * *\", timezone: Europe/Berlin, job: job.yaml, team: nlp}\n")
	fc, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.schedules) != 1 || fc.schedules[0].File != filepath.Join(dir, "job.yaml") || fc.schedules[0].Team != "nlp" {
		t.Fatalf("schedules: %+v", fc.schedules)
	}
	if ss, err := loadSchedules(p); err != nil || len(ss) != 1 || ss[0].Name != "nightly-lr" {
		t.Fatalf("loadSchedules: %v %+v", err, ss)
	}
	for body, want := range map[string][]string{
		"schedules:\n  - {name: a, cron: \"@hourly\", job: job.yaml, colour: red}\n": {"colour"},
		"schedules:\n  - {name: a, cron: \"@hourly\", job: gone.yaml}\n":             {"schedules[0].job", "gone.yaml"},
		"schedules:\n  - {name: A, cron: \"99 * * * *\", job: job.yaml, missed: all}\n": {
			`schedules[0].name: "A"`, `schedules[0].cron: "99 * * * *"`, `schedules[0].missed: "all"`},
	} {
		p := write(body)
		for _, load := range []func(string) error{
			func(p string) error { _, err := loadConfig(p); return err },
			func(p string) error { _, err := loadSchedules(p); return err },
		} {
			err := load(p)
			if err == nil {
				t.Fatalf("%s: loaded", body)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q: %v", body, w, err)
				}
			}
		}
	}
}
