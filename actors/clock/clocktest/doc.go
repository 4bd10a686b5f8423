// Package clocktest holds the fake clock every package's tests use: a
// clock.Clock (and runtime.Clock: After) whose time moves only when the
// test moves it, so deadlines are tested without sleeping.
//
// # Usage
//
//	clk := clocktest.New()
//	cfg.Proc.Clock = clk              // actors.ProcConfig
//	clk.Advance(time.Second)          // fires what is due
//	clk.AdvanceWithin(time.Second)    // jumps to the next deadline, if that near
//	d := <-clk.Asked()                // each After's duration (runtime.Supervisor backoffs)
//
// # Concurrency
//
// All methods may be called from any goroutine. One mutex guards the time
// and every timer's deadline; it is never held across a send that can
// block (a fire goes into the timer's one-slot channel or is already
// there).
//
// # Failure semantics
//
// Nothing fails. A timer armed with d <= 0 fires at once; Reset and Stop
// discard a fire not yet received, as clock.Timer requires.
//
// # Backpressure
//
// A timer holds at most one fire. Asked holds 64 durations; After blocks
// while it is full (a test that uses After reads Asked).
package clocktest
