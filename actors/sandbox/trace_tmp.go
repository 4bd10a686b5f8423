package sandbox

import (
	"fmt"
	"os"
	"sync"
	"time"
)

var traceMu sync.Mutex
var traceF *os.File

func tr(what string) {
	traceMu.Lock()
	defer traceMu.Unlock()
	if traceF == nil {
		traceF, _ = os.OpenFile("/tmp/prep-trace.log", os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	}
	if traceF != nil {
		fmt.Fprintf(traceF, "%d %d %s\n", time.Now().UnixMicro(), os.Getpid(), what)
	}
}
