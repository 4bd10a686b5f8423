package actors

import "github.com/runtimed/runtimed/actors/clock"

// Clock is where a process actor takes the time and its one timer from
// (package clock); ProcConfig.Clock.
type Clock = clock.Clock

// Timer is a Clock's one-shot timer.
type Timer = clock.Timer

// RealClock is the Clock of package time.
type RealClock = clock.Real
