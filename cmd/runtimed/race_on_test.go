//go:build race

package main_test

// raceEnabled: the race detector slows the test process (the Go client's
// decoding) several times; the heaviest stream tests run smaller under it.
const raceEnabled = true
