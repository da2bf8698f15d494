package placement

import (
	"strconv"
	"strings"
)

// neverFitsGPU explains why k GPUs of shape sh fit on no node, even empty.
func (p *planner) neverFitsGPU(sh *shape, k int) string {
	pre := string(WaitNeverFits) + ": "
	switch {
	case p.maxGPUs == 0:
		return pre + "needs " + plural(k, "GPU") + "; no node has GPUs"
	case k > p.maxGPUs:
		return pre + "needs " + plural(k, "GPU") + "; the largest node has " + strconv.Itoa(p.maxGPUs)
	case sh.maxStatic == 0:
		return pre + "no healthy GPU " + sh.kind()
	default:
		return pre + "needs " + describe(sh, k) + "; at most " + strconv.Itoa(sh.maxStatic) + " such healthy GPUs on one node"
	}
}

// noRoomGPU is the "no room" reason for k GPUs of shape sh: what it needs and
// the largest block of them free on one node now. Cached per generation.
func (p *planner) noRoomGPU(sh *shape, k int) string {
	if sh.reasonGen != p.gen {
		sh.reasonGen, sh.reasons = p.gen, nil
	}
	if r, ok := sh.reasons[k]; ok {
		return r
	}
	p.refresh(sh)
	r := string(WaitNoRoom) + ": needs " + describe(sh, k) + "; the largest free block on any node is " + strconv.Itoa(sh.maxAll)
	if sh.reasons == nil {
		sh.reasons = make(map[int]string)
	}
	sh.reasons[k] = r
	return r
}

// kind says which GPUs match sh, for "no healthy GPU …".
func (sh *shape) kind() string {
	models := strings.Join(sh.models, " or ")
	switch {
	case len(sh.models) > 0 && sh.mem > 0:
		return "matches model " + models + " with " + memory(sh.mem) + " free"
	case len(sh.models) > 0:
		return "matches model " + models
	case sh.mem > 0:
		return "has " + memory(sh.mem) + " free"
	}
	return "exists"
}

// describe writes k GPUs of shape sh: "2 GPUs", "4 × ≥40 GB H100 or A100".
func describe(sh *shape, k int) string {
	if sh.mem == 0 && len(sh.models) == 0 {
		return plural(k, "GPU")
	}
	var parts []string
	if sh.mem > 0 {
		parts = append(parts, memory(sh.mem))
	}
	if len(sh.models) > 0 {
		parts = append(parts, strings.Join(sh.models, " or "))
	}
	return strconv.Itoa(k) + " × " + strings.Join(parts, " ")
}

// memory writes a memory floor: "≥40 GB", or "≥1500 MB" when not whole GB.
func memory(mb uint64) string {
	if mb%1024 == 0 {
		return "≥" + strconv.FormatUint(mb/1024, 10) + " GB"
	}
	return "≥" + strconv.FormatUint(mb, 10) + " MB"
}

// plural writes "1 GPU", "2 GPUs".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// fmtInts writes [0 1 2 3].
func fmtInts(xs []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for x, v := range xs {
		if x > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteByte(']')
	return b.String()
}
