package sweep

// Objective: TEMPORARY stand-in until the search branch lands (lead's branch only).
func Objective(h []Point) (float64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[len(h)-1].Value, true
}
