package osproc

// A wait status, as Session.Wait returns it: the exit code (0..255), or
// SignaledBy(N) for a death by signal N. On the wire (and in ExitCode
// fields) a death by signal N reads as 128+N, as shells report it, so
// "exit 130" and a SIGINT death look alike there; ExitSignal fields carry
// the difference (0: it exited on its own, N: signal N).

// signaledFlag marks a wait status as a death by signal: no exit code
// has it (they are 0..255).
const signaledFlag = 1 << 16

// SignaledBy is the wait status of a death by signal sig.
func SignaledBy(sig int) int { return signaledFlag | sig }

// SplitWait returns the protocol's exit code (128+N for signal N) and the
// signal (0 when the process exited on its own) of a wait status.
func SplitWait(status int) (code, sig int) {
	if status >= 0 && status&signaledFlag != 0 {
		sig = status &^ signaledFlag
		return 128 + sig, sig
	}
	return status, 0
}
