// Package proptest holds the property tests of runtimed: model-based state
// machines (pgregory.net/rapid) for the output ring and the process actor,
// failure fan-out over an in-memory transport, end-to-end runs of real
// children over a real websocket, fuzz targets for the wire decoder, and a
// check of the package layering. It has no non-test code; this file exists
// only to document the package.
//
// # Usage
//
//	go test -race ./proptest/                       # everything, about a minute on 2 cores
//	go test ./proptest/ -run TestProcess -rapid.checks=1000 -rapid.steps=100
//	go test ./proptest/ -run TestRing -rapid.seed=N # replay a seed rapid printed
//	FUZZTIME=5m proptest/fuzz.sh                    # run each fuzz target for 5 minutes
//
// Each property states its invariant in one sentence in its comment. A
// failing rapid check prints a shrunk action sequence and writes a fail
// file under proptest/testdata/rapid (git-ignored), which later runs replay
// first. The heavier properties (real children, failure fan-out) cap their
// number of checks unless -rapid.checks or RAPID_CHECKS is given. Bugs the
// properties found are pinned by TestRegression_* tests, each the shrunk
// case.
//
// Files: imports_test.go (package layering), ring_test.go (retention),
// process_test.go (the process actor against a model, with the fake
// Session of actors/osproc/osproctest, on the fake clock of
// actors/clock/clocktest), failure_test.go
// (transport failure, resume, writeId retry), real_test.go (real children
// over a real websocket), fuzz_test.go and fuzz.sh (wire decoding),
// client_test.go (the test client and history checker shared by the last
// two), regression_test.go.
//
// # Concurrency
//
// Every property drives the system from the test goroutine, one step at a
// time, and after each step that produces a fact it waits, by bounded
// polling of a condition (process info, a read), until the actor has
// absorbed it. That keeps the model in lockstep with the actor without
// sleeping. Fakes (the fake Session, the in-memory transport) are driven by
// channels the test owns. No wait is unbounded: a stuck actor fails the
// check with a message instead of hanging the suite.
//
// The process actor model runs its actor on the fake clock
// (clocktest.Clock, moved by AdvanceWithin): where the actor must reach a deadline
// to absorb a step (an exit held while streams are open, the drain after
// a kill), the harness moves the clock to it instead of sleeping; longer
// deadlines (a terminate's grace, long polls, the closed retention) never
// come. The wire properties (failure_test.go, real_test.go) run real
// children on the real clock: their short deadlines (the exit hold, the
// drain after a terminate) bound how long real pipes and descendants get,
// so moving a fake clock past them would cut real output short instead of
// modelling it.
//
// # Failure semantics
//
// The failure property cuts the in-memory transport at a random moment with
// pending requests in flight and checks that the connection ends, that the
// session resumes on a new transport with consistent process state, and
// that retried writes with the same writeId apply once. TestMain runs
// goleak.VerifyTestMain, so every supervisor, connection and helper
// goroutine must be gone once the tests have stopped their supervisors.
//
// # Backpressure
//
// The process property gives its subscriber a small queue and drains it
// only at random moments, or when the actor would otherwise stall on a full
// queue; it checks that delivery is lossless (every event reaches the
// attached subscriber, in seq order) while retention stays within its
// bounds, and that lag-mode subscriptions (ProcessRef.Subscribe) are closed
// rather than waited for when they fall behind. Note that an attached
// subscriber that neither drains nor closes Done holds its process actor
// even after Supervisor.Kill, so the tests detach subscribers before Kill.
package proptest
