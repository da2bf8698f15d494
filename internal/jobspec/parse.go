package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Parse reads a job spec written in YAML or JSON, fills in the built-in
// defaults for the fields it leaves out, and validates it.
//
// It is strict: unknown keys (at any depth), wrong types (`rank: "abc"`, a
// number where a string belongs: quote it), duplicate keys, YAML anchors and
// aliases, several documents, an empty document and a top level that is not
// a mapping are all errors. A key whose value is null counts as left out.
//
// The built-in defaults, applied only to fields the input leaves out (a
// field given as 0 stays 0 and is reported if 0 is not allowed):
// lora.rank 8, lora.alpha 2×rank, lora.dropout 0.05, lora.target_modules
// [q_proj, v_proj], training.epochs 1 (unless training.max_steps is at least
// 1), training.learning_rate 2e-4, training.batch_size 8, training.seed 42,
// output.formats [safetensors], priority normal, trainer reference. The
// daemon's own defaults come later, from Normalize.
//
// Every error Parse returns is a *ValidationError listing every problem it
// found (decoding and Validate's rules together), or, for an input over
// MaxSpecBytes, one that wraps ErrTooLarge. On error the Spec is nil.
func Parse(data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("jobspec: %w: %d bytes, the limit is %d", ErrTooLarge, len(data), MaxSpecBytes)
	}
	root, errs := parseDocument(data)
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: capErrors(errs)}
	}

	var s Spec
	// Room for the values of a spec, so the maps need not grow.
	size := countValues(root, 3, 64)
	d := &decoder{
		present: make(map[string]bool, size),
		raw:     make(map[string]string, size),
	}
	if d.decodeStruct("", root, reflect.ValueOf(&s).Elem()) {
		s.applyParseDefaults(d.present)
	}
	errs = d.errs
	for _, fe := range s.Validate() {
		if d.bad[fe.Field] {
			continue // already reported, as a type error
		}
		if raw, ok := d.raw[fe.Field]; ok {
			fe.Value = truncate(raw)
		}
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: capErrors(errs)}
	}
	return &s, nil
}

// capErrors keeps the first maxErrors problems and says how many it dropped.
func capErrors(errs []FieldError) []FieldError {
	if len(errs) <= maxErrors {
		return errs
	}
	return append(errs[:maxErrors:maxErrors], FieldError{
		Message: fmt.Sprintf("and %d more problems", len(errs)-maxErrors),
	})
}

// docError is a problem with the input as a whole.
func docError(msg string) []FieldError { return []FieldError{{Message: msg}} }

// parseDocument turns data into the root mapping node, or says why it can't.
// Valid JSON is read by encoding/json (yaml.v3 rejects some JSON escapes such
// as "\/"); everything else by yaml.v3.
func parseDocument(data []byte) (*yaml.Node, []FieldError) {
	var root *yaml.Node
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' && json.Valid(data) {
		if errs := jsonTextErrors(data); errs != nil {
			return nil, errs
		}
		n, err := jsonNode(data)
		if err != nil { // not reached: json.Valid said yes
			return nil, docError("invalid JSON: " + err.Error())
		}
		root = n
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, docError("empty document: a job spec is a mapping of fields (name, base_model, dataset, …)")
			}
			return nil, docError("invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case err == nil:
			return nil, docError("more than one YAML document: a job spec is one document")
		case !errors.Is(err, io.EOF):
			return nil, docError("invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if errs := aliasErrors(&doc); len(errs) > 0 {
			return nil, errs
		}
		if len(doc.Content) == 0 {
			return nil, docError("empty document: a job spec is a mapping of fields (name, base_model, dataset, …)")
		}
		root = doc.Content[0]
	}
	switch {
	case isNull(root):
		return nil, docError("empty document: a job spec is a mapping of fields (name, base_model, dataset, …)")
	case root.Kind != yaml.MappingNode:
		return nil, []FieldError{{Value: render(root), Message: "a job spec must be a mapping of fields, not " + kindName(root)}}
	}
	return root, nil
}

// jsonTextErrors refuses JSON (valid by json.Valid) that is not UTF-8 text,
// or that escapes half a UTF-16 surrogate pair: encoding/json would replace
// either with U+FFFD and the spec would say something its author did not
// write. yaml.v3 refuses both on the YAML path. The error says where.
func jsonTextErrors(data []byte) []FieldError {
	if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) {
		return nil // the common case, at utf8.Valid's speed
	}
	where := func(off int) string {
		line := 1 + bytes.Count(data[:off], []byte{'\n'})
		col := off - bytes.LastIndexByte(data[:off], '\n')
		return fmt.Sprintf("line %d, column %d (byte %d)", line, col, off)
	}
	surrogate := func(i int) (rune, bool) { // the \uXXXX escape at data[i:]
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil && utf16.IsSurrogate(rune(v))
	}
	for i := 0; i < len(data); {
		b := data[i]
		switch {
		case b >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				return docError("invalid JSON: not UTF-8 at " + where(i) + ": a job spec must be UTF-8 text")
			}
			i += size
		case b == '\\' && i+1 < len(data):
			// json.Valid passed: a backslash is an escape inside a string.
			if r, ok := surrogate(i); ok {
				if r2, ok2 := surrogate(i + 6); r < 0xdc00 && ok2 && r2 >= 0xdc00 {
					i += 12 // a pair: one character
					continue
				}
				return docError(fmt.Sprintf("invalid JSON: %s at %s is half a UTF-16 surrogate pair, not a character", data[i:i+6], where(i)))
			}
			i += 2
		default:
			i++
		}
	}
	return nil
}

// aliasErrors reports every YAML anchor and alias in the tree. Lathe refuses
// them outright: a spec never needs them, and refusing them rules out alias
// bombs. The walk is iterative and builds a path only for a node it reports,
// so a deeply nested input costs linear time.
func aliasErrors(doc *yaml.Node) []FieldError {
	var errs []FieldError
	stack := []*walkItem{{n: doc}}
	for len(stack) > 0 && len(errs) <= maxErrors {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := it.n
		if n.Kind == yaml.AliasNode {
			errs = append(errs, FieldError{Field: it.path(), Value: truncate("*" + n.Value), Message: "YAML aliases are not allowed"})
			continue
		}
		if n.Anchor != "" {
			errs = append(errs, FieldError{Field: it.path(), Value: truncate("&" + n.Anchor), Message: "YAML anchors are not allowed"})
		}
		stack = it.pushChildren(stack)
	}
	return errs
}

// walkItem is a node of aliasErrors' walk and the way to it.
type walkItem struct {
	n      *yaml.Node
	parent *walkItem
	step   string // ".key" or "[i]" from the parent
}

// path is the item's field path ("resources.gpus", "datasets[0].uri").
func (it *walkItem) path() string {
	var steps []string
	for ; it != nil; it = it.parent {
		steps = append(steps, it.step)
	}
	var b strings.Builder
	for i := len(steps) - 1; i >= 0; i-- {
		b.WriteString(steps[i])
	}
	return strings.TrimPrefix(b.String(), ".")
}

// pushChildren pushes the item's children (a mapping's keys and values) on
// stack, in reverse so that they pop in document order. A document's
// children take its place in the path.
func (it *walkItem) pushChildren(stack []*walkItem) []*walkItem {
	n := it.n
	switch n.Kind {
	case yaml.DocumentNode:
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, &walkItem{n: n.Content[i], parent: it.parent, step: it.step})
		}
	case yaml.SequenceNode:
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, &walkItem{n: n.Content[i], parent: it, step: "[" + strconv.Itoa(i) + "]"})
		}
	case yaml.MappingNode:
		for i := len(n.Content) - 2; i >= 0; i -= 2 {
			step := "." + truncate(n.Content[i].Value)
			stack = append(stack,
				&walkItem{n: n.Content[i+1], parent: it, step: step},
				&walkItem{n: n.Content[i], parent: it, step: step})
		}
	}
	return stack
}

// smallMapping is the most keys decodeStruct checks for duplicates without
// a map.
const smallMapping = 32

// decoder walks a yaml.Node tree against the Go types of Spec, recording every
// problem instead of stopping at the first.
type decoder struct {
	errs []FieldError
	// present holds the path of every field the input set (not null, and
	// decoded without error); Parse's defaults go to the others.
	present map[string]bool
	// raw holds each decoded scalar as written, by path, so Validate's
	// errors can show the user's own text ("1e3", ".nan").
	raw map[string]string
	// bad holds the paths already reported, so Validate does not report
	// them a second time.
	bad map[string]bool
}

var durationType = reflect.TypeFor[Duration]()

// fail records a problem with the value n at path.
func (d *decoder) fail(path string, n *yaml.Node, msg string) {
	if d.bad == nil {
		d.bad = make(map[string]bool)
	}
	d.bad[path] = true
	if len(d.errs) > maxErrors {
		return // capErrors will say there were more
	}
	d.errs = append(d.errs, FieldError{Field: path, Value: render(n), Message: msg})
}

// countValues counts the values in n's mappings and lists down to depth
// levels below n, up to limit.
func countValues(n *yaml.Node, depth, limit int) int {
	if depth == 0 || (n.Kind != yaml.MappingNode && n.Kind != yaml.SequenceNode) {
		return 0
	}
	c := 0
	for i, v := range n.Content {
		if c >= limit {
			return limit
		}
		if n.Kind == yaml.MappingNode && i%2 == 0 {
			continue
		}
		c += 1 + countValues(v, depth-1, limit-c-1)
	}
	return min(c, limit)
}

// decode sets v from n and reports whether n fitted v's type.
func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value) bool {
	if v.Type() == durationType {
		return d.decodeDuration(path, n, v)
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.decodeStruct(path, n, v)
	case reflect.String:
		return d.decodeString(path, n, v)
	case reflect.Int, reflect.Int64:
		return d.decodeInt(path, n, v)
	case reflect.Float64:
		return d.decodeFloat(path, n, v)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String {
			return d.decodeStrings(path, n, v)
		}
	}
	panic("jobspec: no decoder for field type " + v.Type().String())
}

func (d *decoder) decodeStruct(path string, n *yaml.Node, v reflect.Value) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping, not "+kindName(n))
		return false
	}
	fields := fieldsOf(v.Type())
	// The scalar keys met so far, in a map only for a large mapping: a
	// spec's mappings are small, and a scan of the keys before is cheaper.
	var seen map[string]bool
	if len(n.Content) > 2*smallMapping {
		seen = make(map[string]bool, len(n.Content)/2)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(join(path, render(k)), val, "keys must be strings, not "+kindName(k))
			continue
		}
		dup := false
		if seen != nil {
			dup = seen[k.Value]
			seen[k.Value] = true
		} else {
			for j := 0; j < i && !dup; j += 2 {
				dup = n.Content[j].Kind == yaml.ScalarNode && n.Content[j].Value == k.Value
			}
		}
		if dup {
			if len(d.errs) <= maxErrors {
				d.errs = append(d.errs, FieldError{Field: childPath(path, k.Value), Value: render(val), Message: "duplicate key"})
			}
			continue
		}
		child := childPath(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok || k.Tag != "!!str" {
			if len(d.errs) <= maxErrors {
				d.errs = append(d.errs, FieldError{Field: child, Value: render(val), Message: "unknown field"})
			}
			continue
		}
		if isNull(val) {
			continue // as if left out
		}
		if d.decode(child, val, v.Field(idx)) {
			d.present[child] = true
		}
	}
	return true
}

func (d *decoder) decodeString(path string, n *yaml.Node, v reflect.Value) bool {
	switch {
	case n.Kind != yaml.ScalarNode || isNull(n):
		d.fail(path, n, "must be a string, not "+kindName(n))
		return false
	case n.Tag != "!!str":
		d.fail(path, n, "must be a string, not "+kindName(n)+" (put it in quotes)")
		return false
	case !utf8.ValidString(n.Value):
		d.fail(path, n, "must be valid UTF-8")
		return false
	}
	v.SetString(n.Value)
	d.raw[path] = n.Value
	return true
}

func (d *decoder) decodeInt(path string, n *yaml.Node, v reflect.Value) bool {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "must be an integer, not "+kindName(n))
		return false
	}
	if outOfRange(n) {
		d.fail(path, n, MsgOutOfRange)
		return false
	}
	var i int64
	switch n.Tag {
	case "!!int":
		var ok bool
		if i, ok = nodeInt64(n); !ok {
			d.fail(path, n, "must be an integer in the int64 range")
			return false
		}
	case "!!float":
		f, ok := nodeFloat64(n)
		if !ok || f != math.Trunc(f) {
			d.fail(path, n, "must be a whole number")
			return false
		}
		if f < math.MinInt64 || f >= math.MaxInt64 {
			d.fail(path, n, "must be an integer in the int64 range")
			return false
		}
		i = int64(f)
	default:
		d.fail(path, n, "must be an integer, not "+kindName(n))
		return false
	}
	if v.OverflowInt(i) {
		d.fail(path, n, "is out of range")
		return false
	}
	v.SetInt(i)
	d.raw[path] = n.Value
	return true
}

func (d *decoder) decodeFloat(path string, n *yaml.Node, v reflect.Value) bool {
	var f float64
	ok := n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float")
	if ok {
		f, ok = nodeFloat64(n)
	}
	if !ok {
		if outOfRange(n) {
			d.fail(path, n, MsgOutOfRange)
			return false
		}
		d.fail(path, n, "must be a number, not "+kindName(n))
		return false
	}
	v.SetFloat(f)
	d.raw[path] = n.Value
	return true
}

// outOfRange reports whether n is a number as written (a JSON number, or an
// unquoted YAML scalar of the JSON number form) too large for a float64,
// like 1e400: yaml.v3 resolves those to strings.
func outOfRange(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!float" && !(n.Tag == "!!str" && n.Style == 0) {
		return false
	}
	if end, _, ok := scanJSONNumber(n.Value, 0); !ok || end != len(n.Value) {
		return false
	}
	_, err := strconv.ParseFloat(n.Value, 64)
	return errors.Is(err, strconv.ErrRange)
}

// nodeInt64 reads n as n.Decode into an int64 does, and reports whether
// Decode would have succeeded.
func nodeInt64(n *yaml.Node) (int64, bool) {
	if i, ok := quickInt(n); ok {
		return i, true
	}
	var i int64 // escapes to Decode: declared here, it costs only this path
	err := n.Decode(&i)
	return i, err == nil
}

// nodeFloat64 reads n as n.Decode into a float64 does, and reports whether
// Decode would have succeeded.
func nodeFloat64(n *yaml.Node) (float64, bool) {
	if f, ok := quickFloat(n); ok {
		return f, true
	}
	var f float64
	err := n.Decode(&f)
	return f, err == nil
}

// quickInt gives what n.Decode would put in an int64, for a scalar n tagged
// !!int and spelt the JSON way (-?(0|[1-9][0-9]*), as nearly every spec
// has it), without Decode's cost; ok false means: ask Decode. yaml.v3 reads
// such a value with strconv.ParseInt, as here; other spellings (0x10, 1_000,
// +5, 010) it reads its own way, so they go to Decode.
func quickInt(n *yaml.Node) (i int64, ok bool) {
	if n.Tag != "!!int" {
		return 0, false
	}
	if end, integer, ok := scanJSONNumber(n.Value, 0); !ok || !integer || end != len(n.Value) {
		return 0, false
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	return i, err == nil
}

// quickFloat is quickInt for a float64: a quickInt value, or a !!float spelt
// as a JSON number with a fraction or an exponent that strconv.ParseFloat
// reads without error (what yaml.v3 does with it). Anything else, such as a
// !!float without fraction or exponent, which yaml.v3 treats its own way,
// goes to Decode.
func quickFloat(n *yaml.Node) (f float64, ok bool) {
	switch n.Tag {
	case "!!int":
		i, ok := quickInt(n)
		return float64(i), ok
	case "!!float":
		if end, integer, ok := scanJSONNumber(n.Value, 0); !ok || integer || end != len(n.Value) {
			return 0, false
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		return f, err == nil
	}
	return 0, false
}

func (d *decoder) decodeDuration(path string, n *yaml.Node, v reflect.Value) bool {
	// A plain 0 reads as an integer; accept it and let ParseDuration refuse
	// other unit-less numbers.
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		d.fail(path, n, `must be a duration such as "90m", "2h" or "1d12h", not `+kindName(n))
		return false
	}
	dur, err := ParseDuration(n.Value)
	if err != nil {
		msg := `must be a duration such as "90m", "2h" or "1d12h"`
		if strings.HasPrefix(n.Value, "-") {
			msg = "must not be negative"
		}
		d.fail(path, n, msg)
		return false
	}
	v.SetInt(int64(dur))
	d.raw[path] = n.Value
	return true
}

func (d *decoder) decodeStrings(path string, n *yaml.Node, v reflect.Value) bool {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "must be a list of strings, not "+kindName(n))
		return false
	}
	if len(n.Content) == 0 {
		v.SetZero() // [] and a missing list read the same: nil
		return true
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		// A bad item stays "" so the indices of the others stay right.
		d.decodeString(itemPath(path, i), item, out.Index(i))
	}
	v.Set(out)
	return true
}

// fieldCache maps a struct type to its fields' index by JSON name.
var fieldCache sync.Map // reflect.Type → map[string]int

// fieldsOf returns t's fields by the name in their json tag: the schema of
// the spec is its Go types.
func fieldsOf(t reflect.Type) map[string]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]int)
	}
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = i
	}
	fieldCache.Store(t, m)
	return m
}

// childPath is join(path, truncate(key)), the path of the value under key
// in the mapping at path; for the schema's own fields it hands out a string
// made once instead of a new one.
func childPath(path, key string) string {
	if p, ok := schemaPaths()[pathStep{path, key}]; ok {
		return p
	}
	return join(path, truncate(key))
}

type pathStep struct{ parent, key string }

// itemPath is the path of item i of the list at path.
func itemPath(path string, i int) string {
	if i < schemaListItems {
		if p, ok := schemaPaths()[pathStep{path, strconv.Itoa(i)}]; ok {
			return p
		}
	}
	return path + "[" + strconv.Itoa(i) + "]"
}

// schemaListItems is how many items of each list schemaPaths holds paths
// for.
const schemaListItems = 8

// schemaPaths maps the path of every struct in the schema and the key of
// one of its fields to the field's path, and the path of every list and an
// index under schemaListItems (as digits) to the item's path. Built on first
// use, as schemaKeys.
var schemaPaths = sync.OnceValue(func() map[pathStep]string {
	m := make(map[pathStep]string)
	var walk func(path string, t reflect.Type)
	walk = func(path string, t reflect.Type) {
		for name, i := range fieldsOf(t) {
			child := join(path, truncate(name))
			m[pathStep{path, name}] = child
			switch ft := t.Field(i).Type; ft.Kind() {
			case reflect.Struct:
				walk(child, ft)
			case reflect.Slice:
				for i := range schemaListItems {
					m[pathStep{child, strconv.Itoa(i)}] = child + "[" + strconv.Itoa(i) + "]"
				}
			}
		}
	}
	walk("", reflect.TypeFor[Spec]())
	return m
})

// join appends a key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// isNull reports whether n is a YAML null (null, ~, or nothing at all).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// MsgOutOfRange is the message for a number as written too large for a
// float64, like 1e400 (OutOfRange); the sweep spec's parser says it the
// same way.
const MsgOutOfRange = "is out of range for a number (a 64-bit float holds at most about ±1.8e308)"

// OutOfRange reports whether n is a number as written (a JSON number, or an
// unquoted YAML scalar of the JSON number form) too large for a float64,
// like 1e400, which yaml.v3 resolves to a string (YAML) or fails to decode
// (JSON): it is neither "not a number" nor a string to the user.
func OutOfRange(n *yaml.Node) bool { return outOfRange(n) }

// KindName names what n is, for messages: "a list", "a mapping", "a
// number"… (the sweep spec's parser says it the same way).
func KindName(n *yaml.Node) string { return kindName(n) }

// kindName names what n is, for messages: "a list", "a mapping", "a number"…
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		}
		return "a value tagged " + truncate(n.Tag)
	}
	return "a document"
}

// render writes n back as short flow-style text for FieldError.Value: a
// scalar as written, a list as "[a, b]", a mapping as "{k: v}", cut to
// maxValueLen characters. It stops early on a large value, so its cost is
// bounded whatever the input.
func render(n *yaml.Node) string {
	var b strings.Builder
	renderTo(&b, n)
	return truncate(b.String())
}

func renderTo(b *strings.Builder, n *yaml.Node) {
	const budget = 4 * maxValueLen // bytes; at least maxValueLen runes
	if b.Len() > budget {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > budget {
			v = v[:budget]
		}
		b.WriteString(v)
	case yaml.AliasNode:
		b.WriteString("*" + n.Value)
	case yaml.SequenceNode:
		b.WriteString("[")
		for i, c := range n.Content {
			if b.Len() > budget {
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			renderTo(b, c)
		}
		b.WriteString("]")
	case yaml.MappingNode:
		b.WriteString("{")
		for i := 0; i+1 < len(n.Content); i += 2 {
			if b.Len() > budget {
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			renderTo(b, n.Content[i])
			b.WriteString(": ")
			renderTo(b, n.Content[i+1])
		}
		b.WriteString("}")
	case yaml.DocumentNode:
		for _, c := range n.Content {
			renderTo(b, c)
		}
	}
}
