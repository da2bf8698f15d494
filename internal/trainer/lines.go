package trainer

import (
	"bufio"
	"io"
	"strings"
	"unicode/utf8"
)

// readBufferSize is the size of the buffered reader on each pipe; lines longer
// than this are assembled from several reads.
const readBufferSize = 32 << 10

// readLines reads r line by line until EOF or a read error and calls emit for
// each line, without its "\n" or "\r\n", made valid UTF-8. A line longer than
// maxBytes bytes is cut to at most maxBytes (at a rune boundary) and emit gets the
// number of bytes dropped. A last line without a newline is emitted too. The
// error is nil at EOF.
func readLines(r io.Reader, maxBytes int, emit func(line string, dropped int)) error {
	br := bufio.NewReaderSize(r, readBufferSize)
	buf := make([]byte, 0, min(maxBytes, readBufferSize))
	dropped := 0
	for {
		chunk, err := br.ReadSlice('\n')
		eol := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if eol {
			chunk = chunk[:len(chunk)-1]
		}
		if room := maxBytes - len(buf); len(chunk) <= room {
			buf = append(buf, chunk...)
		} else {
			buf = append(buf, chunk[:room]...)
			dropped += len(chunk) - room
		}
		if eol || (err != nil && err != bufio.ErrBufferFull && (len(buf) > 0 || dropped > 0)) {
			emit(finishLine(buf, dropped), dropped)
			buf, dropped = buf[:0], 0
		}
		switch {
		case err == nil, err == bufio.ErrBufferFull:
		case err == io.EOF:
			return nil
		default:
			return err
		}
	}
}

// finishLine turns the collected bytes of one line into a string: a trailing
// "\r" removed, a rune cut in half by truncation removed, invalid UTF-8
// replaced by U+FFFD.
func finishLine(b []byte, dropped int) string {
	if dropped == 0 && len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	if dropped > 0 {
		// Drop a partial rune at the cut, if any: look back at most
		// UTFMax-1 bytes for the start of the last rune.
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
