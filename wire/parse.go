package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// eachField calls f with each key and raw value (trailing space trimmed)
// of the JSON object in msg, in order. It reports false if msg is not an
// object or f returns false. Values are not validated beyond their extent.
func eachField(msg []byte, f func(key, val []byte) bool) bool {
	i := skipSpace(msg, 0)
	if i >= len(msg) || msg[i] != '{' {
		return false
	}
	i++
	for {
		i = skipSpace(msg, i)
		if i >= len(msg) {
			return false
		}
		switch msg[i] {
		case '}':
			return true
		case ',':
			i++
			continue
		case '"':
		default:
			return false
		}
		kend := skipString(msg, i)
		key := msg[i+1 : kend-1]
		i = skipSpace(msg, kend)
		if i >= len(msg) || msg[i] != ':' {
			return false
		}
		i = skipSpace(msg, i+1)
		vend := skipValue(msg, i)
		if !f(key, bytes.TrimRight(msg[i:vend], " \t\r\n")) {
			return false
		}
		i = vend
	}
}

// ParseOutputNotification decodes a process/output notification without
// encoding/json's reflection and double scanning: fields may come in any
// order, unknown ones are skipped, and the chunk is base64-decoded once.
// ok is false if msg is not such a notification (or is unusual enough to
// need the general decoder, e.g. escapes inside the chunk).
func ParseOutputNotification(msg []byte) (n OutputNotification, ok bool) {
	var params []byte
	isOutput := false
	if !eachField(msg, func(key, val []byte) bool {
		switch string(key) {
		case "method":
			isOutput = string(val) == `"process/output"`
		case "params":
			params = val
		}
		return true
	}) || !isOutput {
		return n, false
	}
	var have int
	ok = eachField(params, func(key, val []byte) bool {
		switch string(key) {
		case "processId":
			if json.Unmarshal(val, &n.ProcessID) != nil {
				return false
			}
			have |= 1
		case "seq":
			seq, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return false
			}
			n.Seq = seq
			have |= 2
		case "stream", "chunk":
			if len(val) < 2 || val[0] != '"' || bytes.IndexByte(val, '\\') >= 0 {
				return false
			}
			s := val[1 : len(val)-1]
			if string(key) == "stream" {
				n.Stream = string(s)
				have |= 4
				return true
			}
			out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
			m, err := base64.StdEncoding.Decode(out, s)
			if err != nil {
				return false
			}
			n.Chunk = out[:m]
			have |= 8
		}
		return true
	})
	return n, ok && have == 15
}
