// Package policy holds the scheduler's pure decisions: routing one job over
// a snapshot (DecideRoute), deciding a placement round (DecideRound), and
// building what they look at from plain inputs (Snapshot, LocalPool,
// PlacementNodes, PoolPressure, JoinWaits, CapacityOf) with the run-time
// estimates they use (Estimate, RuntimeEstimate).
//
// Nothing here reads Redis, enqueues a task, serves HTTP or reads the
// clock: the time of a decision is passed in. The scheduler reads its
// inputs from the store, calls these functions and writes their outcome;
// the simulator (scheduler/sim) calls the same functions in virtual time,
// so a simulated decision is the production one.
package policy
