// Package sim is the simulator of `lathe simulate`: it replays a trace in
// virtual time through the scheduler's own decisions — policy.DecideRoute
// (routing.Decide) at submit and policy.DecideRound (reroutes, spill-over,
// placement.Place) at every event — over a simulated pool of owned GPUs
// and the config's cloud backends. Only the clock, the inventory, the
// queue and the jobs' ends are simulated; every decision is the production
// function's. A job's true duration is hidden from the policy until it
// ends (docs/simulate.md).
//
// Reference is the clairvoyant bound the policy is compared with; RunAll
// runs several pool sizes and estimators and Summarize condenses each run
// into a Summary (the report of `lathe simulate`).
package sim
