package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// MinKeySize is the least key material, in bytes, LoadKey and New accept.
const MinKeySize = 32

// LoadKey reads the ledger's HMAC key from the file at path. The file holds
// the key in hex (at least MinKeySize bytes, so 64 hex digits; surrounding
// white space is ignored), as GenerateKey or `openssl rand -hex 32` writes it.
// It refuses a file that group or others may read, write or execute (the
// error names the path and mode), one that is not a regular file, one that is
// not hex, and one with too short a key.
func LoadKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ledger: key file %s is not a regular file (%s)", path, st.Mode())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("ledger: key file %s has mode %04o; it must be readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: key file: %w", err)
	}
	text := strings.TrimSpace(string(b))
	key, err := hex.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("ledger: key file %s must hold the key in hex (as `openssl rand -hex 32` writes it): %v", path, err)
	}
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("ledger: key file %s holds a %d-byte key; at least %d bytes (%d hex digits) are needed", path, len(key), MinKeySize, 2*MinKeySize)
	}
	return key, nil
}

// GenerateKey writes a new random key (MinKeySize bytes, in hex, with a
// newline) to a new file at path with mode 0600. It never overwrites: a ledger
// whose key is replaced can no longer be verified, so an existing file is an
// error (fs.ErrExist).
func GenerateKey(path string) error {
	key := make([]byte, MinKeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("ledger: generate key: %s already exists; refusing to replace a ledger key: %w", path, err)
		}
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	// The umask cannot widen 0600, but an inherited ACL or an odd filesystem
	// might; make sure.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ledger: generate key: %w", err)
	}
	return nil
}
