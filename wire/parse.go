package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// ParseOutputNotification decodes a process/output notification without
// encoding/json's reflection and double scanning: fields may come in any
// order, unknown ones are skipped, and the chunk is base64-decoded once.
// ok is false if msg is not such a notification (or is unusual enough to
// need the general decoder, e.g. escapes inside the chunk).
func ParseOutputNotification(msg []byte) (n OutputNotification, ok bool) {
	// Top level: find "method" (must be process/output) and "params".
	var params []byte
	isOutput := false
	i := skipSpace(msg, 0)
	if i >= len(msg) || msg[i] != '{' {
		return n, false
	}
	i++
	for {
		i = skipSpace(msg, i)
		if i >= len(msg) {
			return n, false
		}
		if msg[i] == '}' {
			break
		}
		if msg[i] == ',' {
			i++
			continue
		}
		if msg[i] != '"' {
			return n, false
		}
		kend := skipString(msg, i)
		key := msg[i+1 : kend-1]
		i = skipSpace(msg, kend)
		if i >= len(msg) || msg[i] != ':' {
			return n, false
		}
		i = skipSpace(msg, i+1)
		vend := skipValue(msg, i)
		switch string(key) {
		case "method":
			isOutput = string(bytes.TrimRight(msg[i:vend], " \t\r\n")) == `"process/output"`
		case "params":
			params = bytes.TrimRight(msg[i:vend], " \t\r\n")
		}
		i = vend
	}
	if !isOutput || len(params) == 0 || params[0] != '{' {
		return n, false
	}
	msg = params
	i = 1
	var have int
	for {
		i = skipSpace(msg, i)
		if i >= len(msg) {
			return n, false
		}
		if msg[i] == '}' {
			break
		}
		if msg[i] == ',' {
			i++
			continue
		}
		if msg[i] != '"' {
			return n, false
		}
		kend := skipString(msg, i)
		key := msg[i+1 : kend-1]
		i = skipSpace(msg, kend)
		if i >= len(msg) || msg[i] != ':' {
			return n, false
		}
		i = skipSpace(msg, i+1)
		vend := skipValue(msg, i)
		val := bytes.TrimRight(msg[i:vend], " \t\r\n")
		switch string(key) {
		case "processId":
			if err := json.Unmarshal(val, &n.ProcessID); err != nil {
				return n, false
			}
			have |= 1
		case "seq":
			seq, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return n, false
			}
			n.Seq = seq
			have |= 2
		case "stream":
			if len(val) < 2 || val[0] != '"' || bytes.IndexByte(val, '\\') >= 0 {
				return n, false
			}
			n.Stream = string(val[1 : len(val)-1])
			have |= 4
		case "chunk":
			if len(val) < 2 || val[0] != '"' || bytes.IndexByte(val, '\\') >= 0 {
				return n, false
			}
			s := val[1 : len(val)-1]
			out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
			m, err := base64.StdEncoding.Decode(out, s)
			if err != nil {
				return n, false
			}
			n.Chunk = out[:m]
			have |= 8
		}
		i = vend
	}
	return n, have == 15
}
