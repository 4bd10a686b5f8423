package actors

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv("RUNTIMED_TEST_FORKS")); err == nil {
		forkBurst(n)
	}
	goleak.VerifyTestMain(closingHost{m})
}

// closingHost closes the sandbox host the tests share (testIsolation)
// after they ran, before goleak looks: it holds a prepared spawning
// thread's goroutine.
type closingHost struct{ m *testing.M }

func (c closingHost) Run() int {
	code := c.m.Run()
	if isoHost != nil {
		_ = isoHost.Close()
	}
	return code
}

// forkBurst is a child mode of the test binary: it tries to start n
// sleeping children, reports how many started, kills them, and exits 1
// if any start failed.
func forkBurst(n int) {
	var started []*exec.Cmd
	failed := 0
	for i := 0; i < n; i++ {
		c := exec.Command("/bin/sleep", "30")
		if err := c.Start(); err != nil {
			failed++
			continue
		}
		started = append(started, c)
	}
	fmt.Printf("started %d failed %d\n", len(started), failed)
	for _, c := range started {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if failed > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}
