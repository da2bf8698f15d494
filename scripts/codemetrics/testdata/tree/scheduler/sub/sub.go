// Package sub is a test tree for codemetrics: two functions with 6
// parameters (named and not), one with 5, and a type of its own named S.
package sub

// S has three methods (five among them).
type S struct{}

func (s S) a() {}
func (s S) b() {}

func six(a, b int, c string, d, e, f bool) {}

func sixUnnamed(int, int, int, int, int, int) {}

func (s S) five(a, b, c, d, e int) {}
