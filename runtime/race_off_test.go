//go:build !race

package runtime

// raceEnabled: see race_on_test.go.
const raceEnabled = false
