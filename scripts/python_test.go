package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// hfPython is the interpreter of the Hugging Face virtualenv that
// scripts/setup.sh --hf builds ($LATHE_HF_VENV, default /opt/lathe/hf-venv).
func hfPython(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("LATHE_HF_VENV")
	if venv == "" {
		venv = "/opt/lathe/hf-venv"
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the Hugging Face virtualenv is required (scripts/setup.sh --test builds it): %v", err)
	}
	return py
}

var ranTests = regexp.MustCompile(`(?m)^Ran (\d+) tests? in`)

// TestPythonPackage runs the lathe_trainer package's own tests
// (scripts/python/tests: the contract functions and the Hugging Face
// callback on real child processes, the GGUF export loaded in real
// llama.cpp) with unittest in the virtualenv. It fails, never skips, when
// the virtualenv, llama-cpp-python or a test is missing.
func TestPythonPackage(t *testing.T) {
	py := hfPython(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	m := ranTests.FindSubmatch(out)
	n := 0
	if m != nil {
		n, _ = strconv.Atoi(string(m[1]))
	}
	if err != nil || n == 0 {
		t.Fatalf("python -m unittest (ran %d tests): %v\n%s", n, err, out)
	}
	t.Logf("ran %d Python tests\n%s", n, out)
}
