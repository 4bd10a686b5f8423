//go:build race

package runtime

// raceEnabled: the race detector slows this process (server and client
// alike) several times; the heaviest stream tests run smaller under it.
const raceEnabled = true
