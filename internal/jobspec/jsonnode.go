package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxJSONDepth is encoding/json's nesting limit: json.Valid refuses deeper
// input (which then goes to yaml.v3), so jsonNode never meets it; it only
// bounds the recursion should jsonNode ever see other input.
const maxJSONDepth = 10000

// jsonNode converts data, one JSON value that json.Valid accepts, into a
// yaml.Node tree, so both syntaxes go through one schema walk. The tree is
// the one encoding/json's Decoder.Token (with UseNumber) would give:
// mappings and sequences in flow style with their keys in document order,
// keys as plain !!str scalars, string values as double-quoted !!str scalars
// unescaped as encoding/json does, numbers as written, tagged !!int when
// they fit an int64 and !!float otherwise, true/false as !!bool and null as
// !!null.
//
// It is a small recursive-descent reader over the bytes, many times faster
// than Decoder.Token. It never panics: input that is not valid JSON gets an
// error, not a tree.
// JSONNode converts one valid JSON value into a yaml.Node tree (what Parse
// does for a JSON spec; the sweep spec's parser uses it too).
func JSONNode(data []byte) (*yaml.Node, error) { return jsonNode(data) }

func jsonNode(data []byte) (*yaml.Node, error) {
	c := jsonConv{data: data, stack: make([]*yaml.Node, 0, 32)}
	// About one node per 8 bytes of a typical spec; the slabs grow if not.
	c.nodeChunk = min(len(data)/8+1, 256)
	c.slotChunk = c.nodeChunk
	n, err := c.value()
	if err != nil {
		return nil, err
	}
	c.skipSpace()
	if c.pos != len(data) {
		return nil, c.syntaxError("after the top-level value")
	}
	return n, nil
}

// jsonConv holds jsonNode's state. Nodes and Content slices are cut from
// slabs, so a spec costs a few allocations rather than a few per value.
type jsonConv struct {
	data  []byte
	pos   int
	depth int

	nodes     []yaml.Node  // unused nodes
	nodeChunk int          // size of the next node slab
	slots     []*yaml.Node // unused Content slots
	slotChunk int          // size of the next slot slab
	stack     []*yaml.Node // the children of the open containers
}

func (c *jsonConv) syntaxError(what string) error {
	if c.pos >= len(c.data) {
		return fmt.Errorf("unexpected end of JSON input %s", what)
	}
	return fmt.Errorf("unexpected %q at offset %d %s", c.data[c.pos], c.pos, what)
}

func (c *jsonConv) newNode() *yaml.Node {
	if len(c.nodes) == 0 {
		c.nodes = make([]yaml.Node, c.nodeChunk)
		c.nodeChunk = min(2*c.nodeChunk, 1024)
	}
	n := &c.nodes[0]
	c.nodes = c.nodes[1:]
	return n
}

// content moves the children pushed since base into a new Content slice; no
// children gives nil, as Decoder.Token's appends did.
func (c *jsonConv) content(base int) []*yaml.Node {
	m := len(c.stack) - base
	if m <= 0 {
		return nil
	}
	if m > len(c.slots) {
		// Every node but the root takes one slot: as many as nodes.
		c.slots = make([]*yaml.Node, max(m, c.slotChunk))
		c.slotChunk = min(2*c.slotChunk, 1024)
	}
	s := c.slots[:m:m]
	c.slots = c.slots[m:]
	copy(s, c.stack[base:])
	clear(c.stack[base:]) // let the GC see only the tree
	c.stack = c.stack[:base]
	return s
}

func (c *jsonConv) skipSpace() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value reads one value starting at or after c.pos.
func (c *jsonConv) value() (*yaml.Node, error) {
	c.skipSpace()
	if c.pos >= len(c.data) {
		return nil, c.syntaxError("looking for a value")
	}
	switch b := c.data[c.pos]; b {
	case '{', '[':
		return c.container(b)
	case '"':
		s, err := c.str(false)
		if err != nil {
			return nil, err
		}
		n := c.newNode()
		n.Kind, n.Tag, n.Value, n.Style = yaml.ScalarNode, "!!str", s, yaml.DoubleQuotedStyle
		return n, nil
	case 't':
		return c.literal("true", "!!bool")
	case 'f':
		return c.literal("false", "!!bool")
	case 'n':
		return c.literal("null", "!!null")
	default:
		if b == '-' || '0' <= b && b <= '9' {
			return c.number()
		}
		return nil, c.syntaxError("looking for a value")
	}
}

func (c *jsonConv) literal(word, tag string) (*yaml.Node, error) {
	if len(c.data)-c.pos < len(word) || string(c.data[c.pos:c.pos+len(word)]) != word {
		return nil, c.syntaxError("in a literal")
	}
	c.pos += len(word)
	n := c.newNode()
	n.Kind, n.Tag, n.Value = yaml.ScalarNode, tag, word
	return n, nil
}

// number reads a number and keeps its text, as json.Number does.
func (c *jsonConv) number() (*yaml.Node, error) {
	start := c.pos
	end, integer, ok := scanJSONNumber(c.data, start)
	if !ok {
		c.pos = end
		return nil, c.syntaxError("in a number")
	}
	c.pos = end
	n := c.newNode()
	n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!float", string(c.data[start:end])
	// A fraction or an exponent makes ParseInt fail; spare it the error
	// it would allocate.
	if integer {
		if _, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			n.Tag = "!!int"
		}
	}
	return n, nil
}

// scanJSONNumber reads the JSON number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
// at d[i:] and returns where it ends, whether it has neither fraction nor
// exponent, and whether it is well formed (if not, end is where it breaks).
func scanJSONNumber[T string | []byte](d T, i int) (end int, integer, ok bool) {
	digits := func() bool {
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return i, false, false
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		if !digits() {
			return i, false, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return i, false, false
		}
	}
	return i, integer, true
}

// str reads a string; c.pos is at its opening quote. A string without
// escapes that is valid UTF-8 is taken as it stands (a key the schema knows
// costs no allocation); any other goes through json.Unmarshal, so escapes,
// surrogates and invalid UTF-8 come out exactly as encoding/json has them.
func (c *jsonConv) str(key bool) (string, error) {
	d, start := c.data, c.pos
	plain, ascii := true, true
	i := start + 1
	for ; i < len(d); i++ {
		b := d[i]
		if b == '"' {
			break
		}
		switch {
		case b == '\\':
			plain = false
			i++ // the escaped byte; json.Unmarshal checks the escape
		case b < 0x20:
			c.pos = i
			return "", c.syntaxError("in a string")
		case b >= utf8.RuneSelf:
			ascii = false
		}
	}
	if i >= len(d) {
		c.pos = len(d)
		return "", c.syntaxError("in a string")
	}
	c.pos = i + 1
	raw := d[start+1 : i]
	if plain && (ascii || utf8.Valid(raw)) {
		if key {
			if k, ok := schemaKeys()[string(raw)]; ok {
				return k, nil
			}
		}
		return string(raw), nil
	}
	var s string
	if err := json.Unmarshal(d[start:c.pos], &s); err != nil {
		return "", err
	}
	return s, nil
}

// container reads an object or an array; c.pos is at its opening bracket.
func (c *jsonConv) container(open byte) (*yaml.Node, error) {
	if c.depth >= maxJSONDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	c.depth++
	n, end := c.containerNode(open)
	c.pos++
	base := len(c.stack)
	c.skipSpace()
	if c.pos < len(c.data) && c.data[c.pos] == end {
		c.pos++
		c.depth--
		return n, nil
	}
	for {
		if open == '{' {
			if err := c.key(); err != nil {
				return nil, err
			}
		}
		v, err := c.value()
		if err != nil {
			return nil, err
		}
		c.stack = append(c.stack, v)
		c.skipSpace()
		if c.pos >= len(c.data) {
			return nil, c.syntaxError("in an object or array")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
			continue
		case end:
			c.pos++
			c.depth--
			n.Content = c.content(base)
			return n, nil
		}
		return nil, c.syntaxError("in an object or array")
	}
}

// containerNode is the node for a container opened by open ('{' or '['),
// its content still to come, and the byte that closes it.
func (c *jsonConv) containerNode(open byte) (n *yaml.Node, end byte) {
	n = c.newNode()
	n.Kind, n.Tag, n.Style = yaml.SequenceNode, "!!seq", yaml.FlowStyle
	end = ']'
	if open == '{' {
		n.Kind, n.Tag, end = yaml.MappingNode, "!!map", '}'
	}
	return n, end
}

// key reads an object's key and the ':' after it, and pushes the key's
// node on the stack.
func (c *jsonConv) key() error {
	c.skipSpace()
	if c.pos >= len(c.data) || c.data[c.pos] != '"' {
		return c.syntaxError("looking for a key")
	}
	s, err := c.str(true)
	if err != nil {
		return err
	}
	k := c.newNode()
	k.Kind, k.Tag, k.Value = yaml.ScalarNode, "!!str", s
	c.stack = append(c.stack, k)
	c.skipSpace()
	if c.pos >= len(c.data) || c.data[c.pos] != ':' {
		return c.syntaxError("after a key")
	}
	c.pos++
	return nil
}

// schemaKeys holds every key of the spec's schema, so jsonNode can hand out
// these strings instead of allocating a copy of each key. It is built on
// first use, not at init: every program that links jobspec (the lathe CLI
// among them) would otherwise pay for the reflection walk at start.
var schemaKeys = sync.OnceValue(func() map[string]string {
	m := make(map[string]string)
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for name, i := range fieldsOf(t) {
			m[name] = name
			if ft := t.Field(i).Type; ft.Kind() == reflect.Struct {
				walk(ft)
			}
		}
	}
	walk(reflect.TypeFor[Spec]())
	return m
})
