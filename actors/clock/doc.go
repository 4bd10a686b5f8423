// Package clock is the time source of the process actors: a Clock hands
// out the time and one-shot Timers. Real is package time's; tests use
// clocktest.Clock, which moves only when the test moves it.
//
// # Usage
//
//	var c clock.Clock = clock.Real{}
//	t := c.NewTimer()     // stopped
//	t.Reset(time.Second)  // armed
//	<-t.C()
//
// # Concurrency
//
// A Timer is used only by the goroutine that created it; Real may be
// shared.
//
// # Failure semantics
//
// Nothing fails. Reset and Stop discard a fire not yet received.
//
// # Backpressure
//
// A timer holds at most one fire.
package clock
