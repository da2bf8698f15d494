package ledger_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/ledger"
)

func TestGenerateAndLoadKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.key")
	if err := ledger.GenerateKey(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v", st.Mode(), err)
	}
	key, err := ledger.LoadKey(path)
	if err != nil || len(key) != ledger.MinKeySize {
		t.Fatalf("load: %d bytes, %v", len(key), err)
	}
	// Never overwrite a key: the ledger it signed could not be verified.
	if err := ledger.GenerateKey(path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second generate: %v", err)
	}
	again, _ := ledger.LoadKey(path)
	if !bytes.Equal(key, again) {
		t.Fatal("the key changed")
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if err := ledger.GenerateKey(other); err != nil {
		t.Fatal(err)
	}
	if k2, _ := ledger.LoadKey(other); bytes.Equal(k2, key) {
		t.Fatal("two generated keys are equal")
	}
}

func TestLoadKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	good := strings.Repeat("ab", 32) + "\n"
	if _, err := ledger.LoadKey(write("ok.key", good, 0o400)); err != nil {
		t.Fatalf("0400 key: %v", err)
	}
	if k, err := ledger.LoadKey(write("long.key", "  "+strings.Repeat("cd", 64)+"\n\n", 0o600)); err != nil || len(k) != 64 {
		t.Fatalf("64-byte key: %d %v", len(k), err)
	}
	cases := []struct {
		name, content string
		mode          os.FileMode
		want          []string // substrings of the error
	}{
		{"world.key", good, 0o644, []string{"world.key", "0644", "chmod 600"}},
		{"group.key", good, 0o640, []string{"group.key", "0640"}},
		{"groupwrite.key", good, 0o620, []string{"0620"}},
		{"short.key", strings.Repeat("ab", 31), 0o600, []string{"short.key", "31-byte key", "at least 32"}},
		{"raw.key", strings.Repeat("z", 40), 0o600, []string{"raw.key", "hex"}},
		{"empty.key", "", 0o600, []string{"0-byte key"}},
	}
	for _, c := range cases {
		p := write(c.name, c.content, c.mode)
		_, err := ledger.LoadKey(p)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	if _, err := ledger.LoadKey(filepath.Join(dir, "absent.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent key: %v", err)
	}
	if _, err := ledger.LoadKey(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as key: %v", err)
	}
}

func TestNewPanicsOnShortKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted a 16-byte key")
		}
	}()
	ledger.New(nil, make([]byte, 16), "")
}
