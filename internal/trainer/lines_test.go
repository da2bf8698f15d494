package trainer

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func collectLines(t *testing.T, r io.Reader, maxBytes int) (lines []string, dropped []int) {
	t.Helper()
	err := readLines(r, maxBytes, func(line string, d int) {
		lines = append(lines, line)
		dropped = append(dropped, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines, dropped
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("x", 3*readBufferSize)
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		dropped []int
	}{
		{"simple", "a\nb\n", 10, []string{"a", "b"}, []int{0, 0}},
		{"tail without newline", "a\nb", 10, []string{"a", "b"}, []int{0, 0}},
		{"blank lines kept", "\n\na\n", 10, []string{"", "", "a"}, []int{0, 0, 0}},
		{"crlf", "a\r\nb\r\n", 10, []string{"a", "b"}, []int{0, 0}},
		{"empty input", "", 10, nil, nil},
		{"exactly max", "abcde\n", 5, []string{"abcde"}, []int{0}},
		{"truncated", "abcdefgh\nxy\n", 5, []string{"abcde", "xy"}, []int{3, 0}},
		{"truncated tail", "abcdefgh", 5, []string{"abcde"}, []int{3}},
		{"longer than the buffer", long + "\nend\n", 10, []string{"xxxxxxxxxx", "end"}, []int{len(long) - 10, 0}},
		{"long line kept whole", long + "\n", len(long), []string{long}, []int{0}},
		{"cut inside a rune", "ab\u00e9cd\n", 3, []string{"ab"}, []int{3}},
		{"invalid UTF-8 replaced", "a\xffb\n", 10, []string{"a\uFFFDb"}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range map[string]io.Reader{
				"whole":        strings.NewReader(tt.in),
				"byte by byte": iotest.OneByteReader(strings.NewReader(tt.in)),
			} {
				lines, dropped := collectLines(t, r, tt.max)
				if strings.Join(lines, "|") != strings.Join(tt.want, "|") || len(lines) != len(tt.want) {
					t.Fatalf("lines = %q, want %q", lines, tt.want)
				}
				for i := range dropped {
					if dropped[i] != tt.dropped[i] {
						t.Errorf("dropped = %v, want %v", dropped, tt.dropped)
						break
					}
				}
			}
		})
	}
}

func TestReadLinesError(t *testing.T) {
	boom := errors.New("boom")
	var lines []string
	err := readLines(io.MultiReader(strings.NewReader("a\npartial"), iotest.ErrReader(boom)), 10, func(l string, _ int) {
		lines = append(lines, l)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if strings.Join(lines, "|") != "a|partial" {
		t.Errorf("lines = %q; the partial line before the error must be kept", lines)
	}
}
