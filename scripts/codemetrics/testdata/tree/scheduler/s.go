// Package scheduler is a test tree for codemetrics: S has 31 methods,
// value and pointer receivers together; G and P have generic receivers.
package scheduler

// S is the wide type.
type S struct{}

func (s S) m0()   {}
func (s *S) m1()  {}
func (s S) m2()   {}
func (s *S) m3()  {}
func (s S) m4()   {}
func (s *S) m5()  {}
func (s S) m6()   {}
func (s *S) m7()  {}
func (s S) m8()   {}
func (s *S) m9()  {}
func (s S) m10()  {}
func (s *S) m11() {}
func (s S) m12()  {}
func (s *S) m13() {}
func (s S) m14()  {}
func (s *S) m15() {}
func (s S) m16()  {}
func (s *S) m17() {}
func (s S) m18()  {}
func (s *S) m19() {}
func (s S) m20()  {}
func (s *S) m21() {}
func (s S) m22()  {}
func (s *S) m23() {}
func (s S) m24()  {}
func (s *S) m25() {}
func (s S) m26()  {}
func (s *S) m27() {}
func (s S) m28()  {}
func (s *S) m29() {}
func (s S) m30()  {}

// G has one type parameter.
type G[T any] struct{}

func (g *G[T]) a() {}
func (g G[T]) b()  {}

// P has two.
type P[K comparable, V any] struct{}

func (p *P[K, V]) a() {}
