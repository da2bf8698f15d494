package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// termSafe makes text that came from a trainer or the server safe to print
// on a terminal: a hostile trainer's log line must not be able to move the
// cursor, rewrite earlier lines, set the window title, write the clipboard
// (OSC 52) or reorder what the reader sees (bidi overrides). Every C0 control
// but tab, DEL, every C1 control, the Unicode bidi embedding, override and
// isolate marks, and bytes that are not UTF-8 are shown as Go escapes
// (\x1b, \u202e) instead. Printable text, tabs and non-ASCII letters pass
// unchanged, so an ordinary log line reads as the trainer wrote it.
// -o json output needs none of this: JSON escapes control characters.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) {
			return true
		}
		i += n
	}
	return false
}

func unsafeRune(r rune) bool {
	switch {
	case r == '\t':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
