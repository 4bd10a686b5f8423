package console

import (
	"os"
	"strconv"
	"strings"
)

// procUsage reads a running process's resident memory and CPU time from
// /proc (the process itself, not its whole tree: reading the tree's cgroup
// is not done yet). ok false when it cannot be read (gone, not Linux).
func procUsage(pid int) (rssBytes int64, cpuSeconds float64, ok bool) {
	if pid <= 0 {
		return 0, 0, false
	}
	p := "/proc/" + strconv.Itoa(pid)
	statm, err := os.ReadFile(p + "/statm")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(statm))
	if len(f) < 2 {
		return 0, 0, false
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	rssBytes = pages * int64(os.Getpagesize())
	stat, err := os.ReadFile(p + "/stat")
	if err != nil {
		return rssBytes, 0, true
	}
	// Fields after the command (which may hold spaces) start after the last ')'.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		rest := strings.Fields(s[i+1:])
		if len(rest) > 13 {
			ut, _ := strconv.ParseFloat(rest[11], 64)
			st, _ := strconv.ParseFloat(rest[12], 64)
			cpuSeconds = (ut + st) / 100 // USER_HZ
		}
	}
	return rssBytes, cpuSeconds, true
}
