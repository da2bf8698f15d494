package scheduler

func (s S) t1() {}
func (s S) t2() {}
