package sweepspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// maxErrors bounds how many problems one ValidationError carries (as
// jobspec does): a hostile input must not become a huge error.
const maxErrors = 100

// maxDepth bounds the nesting of a document: a sweep spec is four levels
// deep, its job three more.
const maxDepth = 64

// parseDocument turns data into its root mapping node, or says why it
// can't. what names the document in messages ("a sweep spec", "a job
// spec"). Valid JSON is read by encoding/json (yaml.v3 refuses some JSON
// escapes such as "\/"), everything else by yaml.v3; anchors, aliases and
// several documents are refused.
func parseDocument(data []byte, what string) (*yaml.Node, []jobspec.FieldError) {
	empty := []jobspec.FieldError{{Message: "empty document: " + what + " is a mapping of fields"}}
	var root *yaml.Node
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' && json.Valid(data) {
		n, err := jobspec.JSONNode(data)
		if err != nil {
			return nil, docError("invalid JSON: " + err.Error())
		}
		root = n
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, empty
			}
			return nil, docError("invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case err == nil:
			return nil, docError("more than one YAML document: " + what + " is one document")
		case !errors.Is(err, io.EOF):
			return nil, docError("invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 {
			return nil, empty
		}
		root = doc.Content[0]
	}
	if errs := shapeErrors(root); len(errs) > 0 {
		return nil, errs
	}
	switch {
	case isNull(root):
		return nil, empty
	case root.Kind != yaml.MappingNode:
		return nil, []jobspec.FieldError{{Value: render(root), Message: what + " must be a mapping of fields, not " + jobspec.KindName(root)}}
	}
	return root, nil
}

func docError(msg string) []jobspec.FieldError { return []jobspec.FieldError{{Message: msg}} }

// shapeErrors reports every YAML anchor and alias (refused outright: a spec
// never needs them, and refusing them rules out alias bombs) and nesting
// deeper than maxDepth. The walk is iterative.
func shapeErrors(root *yaml.Node) []jobspec.FieldError {
	type item struct {
		n     *yaml.Node
		path  string
		depth int
	}
	var errs []jobspec.FieldError
	stack := []item{{n: root}}
	for len(stack) > 0 && len(errs) < maxErrors {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch n := it.n; {
		case n.Kind == yaml.AliasNode:
			errs = append(errs, jobspec.FieldError{Field: it.path, Value: "*" + jobspec.TruncateValue(n.Value), Message: "YAML aliases are not allowed"})
			continue
		case n.Anchor != "":
			errs = append(errs, jobspec.FieldError{Field: it.path, Value: "&" + jobspec.TruncateValue(n.Anchor), Message: "YAML anchors are not allowed"})
		case it.depth > maxDepth:
			return append(errs, jobspec.FieldError{Field: it.path, Message: fmt.Sprintf("nested more than %d levels deep", maxDepth)})
		}
		for i, c := range it.n.Content {
			p := it.path + "[" + strconv.Itoa(i) + "]"
			if it.n.Kind == yaml.MappingNode {
				p = join(it.path, jobspec.TruncateValue(it.n.Content[i&^1].Value))
			}
			stack = append(stack, item{c, p, it.depth + 1})
		}
	}
	return errs
}

// decoder walks the sweep spec's nodes, recording every problem instead of
// stopping at the first.
type decoder struct {
	errs []jobspec.FieldError
}

// add records a problem.
func (d *decoder) add(fe jobspec.FieldError) {
	if len(d.errs) <= maxErrors {
		d.errs = append(d.errs, fe)
	}
}

// fail records a problem with the value n at path.
func (d *decoder) fail(path string, n *yaml.Node, msg string) {
	fe := jobspec.FieldError{Field: path, Message: msg}
	if n != nil {
		fe.Value = render(n)
	}
	d.add(fe)
}

// mapping calls fn for each key of the mapping n at path (in document
// order) whose value is not null, after reporting a value that is not a
// mapping, keys that are not strings, duplicate keys and keys fn does not
// know (fn returns false for those: it reports nothing itself then).
func (d *decoder) mapping(path string, n *yaml.Node, fn func(key, child string, v *yaml.Node) bool) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping, not "+jobspec.KindName(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		child := join(path, jobspec.TruncateValue(k.Value))
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag != "!!str":
			d.fail(join(path, render(k)), v, "keys must be strings, not "+jobspec.KindName(k))
		case seen[k.Value]:
			d.fail(child, v, "duplicate key")
		case isNull(v):
			seen[k.Value] = true // as if left out
		default:
			seen[k.Value] = true
			if !fn(k.Value, child, v) {
				d.fail(child, v, "unknown field")
			}
		}
	}
	return true
}

// str decodes a string.
func (d *decoder) str(path string, n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		msg := "must be a string, not " + jobspec.KindName(n)
		if n.Kind == yaml.ScalarNode {
			msg += " (put it in quotes)"
		}
		d.fail(path, n, msg)
		return "", false
	}
	return n.Value, true
}

// integer decodes a whole number (8 or 8.0) in the int64 range.
func (d *decoder) integer(path string, n *yaml.Node) (int64, bool) {
	v, ok := scalarValue(n)
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x), true
		}
		if x == math.Trunc(x) {
			d.fail(path, n, "must be an integer in the int64 range")
		} else {
			d.fail(path, n, "must be a whole number")
		}
		return 0, false
	}
	if jobspec.OutOfRange(n) {
		d.fail(path, n, jobspec.MsgOutOfRange)
		return 0, false
	}
	if ok && n.Tag == "!!int" {
		d.fail(path, n, "must be an integer in the int64 range")
	} else {
		d.fail(path, n, "must be an integer, not "+jobspec.KindName(n))
	}
	return 0, false
}

// number decodes a finite number.
func (d *decoder) number(path string, n *yaml.Node) (float64, bool) {
	v, _ := scalarValue(n)
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			d.fail(path, n, "must be a finite number")
			return 0, false
		}
		return x, true
	}
	if jobspec.OutOfRange(n) {
		d.fail(path, n, jobspec.MsgOutOfRange)
		return 0, false
	}
	d.fail(path, n, "must be a number, not "+jobspec.KindName(n))
	return 0, false
}

// scalarValue reads a scalar node as Go: string, int64, float64, bool or
// nil (null); ok false for anything else (a list, a mapping, a timestamp,
// an integer outside the int64 range).
func scalarValue(n *yaml.Node) (v any, ok bool) {
	if n.Kind != yaml.ScalarNode {
		return nil, false
	}
	switch n.Tag {
	case "!!str":
		return n.Value, true
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err == nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, false
		}
		return i, true
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, false
		}
		return f, true
	}
	return nil, false
}

// join appends a key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// isNull reports whether n is a YAML null (null, ~, or nothing at all).
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// render writes n back as short flow-style text for FieldError.Value, cut
// to jobspec's 200 characters; its cost is bounded whatever the input.
func render(n *yaml.Node) string {
	var b strings.Builder
	renderTo(&b, n)
	return jobspec.TruncateValue(b.String())
}

func renderTo(b *strings.Builder, n *yaml.Node) {
	const budget = 800 // bytes: at least the 200 runes kept
	if b.Len() > budget {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		b.WriteString(n.Value[:min(len(n.Value), budget)])
	case yaml.AliasNode:
		b.WriteString("*" + n.Value)
	case yaml.SequenceNode, yaml.MappingNode:
		open, sep, end := "[", ", ", "]"
		if n.Kind == yaml.MappingNode {
			open, end = "{", "}"
		}
		b.WriteString(open)
		for i, c := range n.Content {
			if b.Len() > budget {
				break
			}
			switch {
			case n.Kind == yaml.MappingNode && i%2 == 1:
				b.WriteString(": ")
			case i > 0:
				b.WriteString(sep)
			}
			renderTo(b, c)
		}
		b.WriteString(end)
	}
}
