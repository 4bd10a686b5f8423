package wire

import "strconv"

// AppendOutputNotification appends a process/output notification to dst
// without reflection or intermediate copies: the chunk is base64-encoded
// straight into dst. This is the server's hot path.
func AppendOutputNotification(dst []byte, processID string, seq uint64, stream string, chunk []byte) []byte {
	dst = append(dst, `{"method":"process/output","params":{"processId":`...)
	dst = AppendString(dst, processID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"stream":"`...)
	dst = append(dst, stream...)
	dst = append(dst, `","chunk":"`...)
	dst = AppendBase64(dst, chunk)
	return append(dst, `"}}`...)
}

// AppendExitedNotification appends a process/exited notification to dst.
// limit, if not empty, names the resource limit that ended the process.
// exitSignal (ext) is the signal that killed the process, 0 when it exited
// on its own (exitCode 128+N alone cannot tell "exit 130" from SIGINT).
func AppendExitedNotification(dst []byte, processID string, seq uint64, exitCode, exitSignal int, limit string) []byte {
	dst = append(dst, `{"method":"process/exited","params":{"processId":`...)
	dst = AppendString(dst, processID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"exitCode":`...)
	dst = strconv.AppendInt(dst, int64(exitCode), 10)
	dst = append(dst, `,"exitSignal":`...)
	dst = strconv.AppendInt(dst, int64(exitSignal), 10)
	if limit != "" {
		dst = append(dst, `,"limit":`...)
		dst = AppendString(dst, limit)
	}
	return append(dst, `,"sandboxDenied":false}}`...)
}

// AppendClosedNotification appends a process/closed notification to dst.
func AppendClosedNotification(dst []byte, processID string, seq uint64) []byte {
	dst = append(dst, `{"method":"process/closed","params":{"processId":`...)
	dst = AppendString(dst, processID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, `}}`...)
}

// AppendFailedClosedNotification appends the process/closed notification
// that ends a process whose server-side handling failed (ext): it carries
// "failure" with the reason, and nothing follows it. A client that ignores
// the extra field sees the process closed; requests about it answer -32603.
func AppendFailedClosedNotification(dst []byte, processID string, seq uint64, failure string) []byte {
	dst = append(dst, `{"method":"process/closed","params":{"processId":`...)
	dst = AppendString(dst, processID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"failure":`...)
	dst = AppendString(dst, failure)
	return append(dst, `}}`...)
}
