package worker

import "github.com/lathe-ml/lathe/internal/jobtype"

// SetTestHookBeforeTrainer sets a TEST HOOK run just before each trainer
// starts (after the attempt's files were checked); nil removes it.
func SetTestHookBeforeTrainer(h func(job *jobtype.Job)) {
	if h == nil {
		testHookBeforeTrainer.Store(nil)
		return
	}
	testHookBeforeTrainer.Store(&h)
}

// SetTestGeteuid replaces os.Geteuid for the run_as check (a TEST HOOK);
// it returns a function that restores it.
func SetTestGeteuid(f func() int) (restore func()) {
	old := geteuid
	geteuid = f
	return func() { geteuid = old }
}

// CgroupDirOf returns the worker's own cgroup, parent of its attempts'
// cgroups ("" without cgroups), as Start set it (a TEST HOOK).
func CgroupDirOf(w *Worker) string { return w.cgroupDir }
