package sweepspec

// JSON: TEMPORARY stand-in until the sweepspec branch lands (lead's branch only).
func (s *Sweep) JSON() []byte { return nil }
