package proptest

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// property stops its supervisor, servers and transports.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// capChecks lowers rapid's number of checks to n for one test, unless the
// caller chose a number (-rapid.checks or RAPID_CHECKS). It keeps the heavy
// properties within the suite's time budget; -short divides by 5 as usual.
func capChecks(t *testing.T, n int) {
	t.Helper()
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		return
	}
	userSet := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			userSet = true
		}
	})
	f := flag.Lookup("rapid.checks")
	if userSet || f == nil {
		return
	}
	old := f.Value.String()
	if cur, err := strconv.Atoi(old); err == nil && cur <= n {
		return
	}
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatalf("set rapid.checks: %v", err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// waitFor polls cond until it holds or d has passed, backing off from
// 20µs to 2ms between polls. It reports whether cond held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := 20 * time.Microsecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		timer := time.NewTimer(pause)
		<-timer.C
		pause = min(pause*2, 2*time.Millisecond)
	}
}

// httptestServer starts an httptest server for h.
func httptestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }
