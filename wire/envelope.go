package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// ID is a request id exactly as the client sent it: the raw JSON of an
// integer or a string. It is echoed byte for byte in the response.
type ID []byte

// MalformedID is the id of the answer to a message that could not be parsed.
var MalformedID = ID("-1")

// NullID is the id of the answer to a request whose id is null (JSON-RPC
// 2.0: the id could not be determined).
var NullID = ID("null")

// IntID returns the ID of an integer.
func IntID(n int64) ID { return ID(strconv.AppendInt(nil, n, 10)) }

// StringID returns the ID of a string.
func StringID(s string) ID { b, _ := json.Marshal(s); return ID(b) }

// String returns the raw JSON text of the id.
func (id ID) String() string { return string(id) }

// Kind tells what a decoded message is.
type Kind int

const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

// Message is one decoded inbound envelope. Params, Result and Error are raw
// JSON; Params is nil when absent or null.
type Message struct {
	Kind   Kind
	ID     ID
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  json.RawMessage
}

type rawEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	// "jsonrpc" and unknown members are ignored.
}

var null = []byte("null")

// Decode parses one inbound message. A message that is not valid JSON or
// not a valid envelope yields an error from [ErrMalformed] and a Message
// whose ID is the id to answer it with: [NullID] for a request whose id is
// null, [MalformedID] otherwise. The caller answers and keeps the
// connection open. An id is accepted only if it can be echoed byte for
// byte: an integer (int64) or a string that is valid UTF-8.
func Decode(data []byte) (Message, *Error) { return decode(data, true) }

// DecodeOwned is Decode of a message the caller hands over: the Message
// points into data instead of a copy (a server that releases a large
// message's read buffer saves a copy of it).
func DecodeOwned(data []byte) (Message, *Error) { return decode(data, false) }

func decode(data []byte, clone bool) (Message, *Error) {
	env, ok := scanEnvelope(data, clone)
	if !ok {
		env = rawEnvelope{}
		if err := json.Unmarshal(data, &env); err != nil {
			return Message{ID: MalformedID}, ErrMalformed(err.Error())
		}
	}
	var m Message
	id := bytes.TrimSpace(env.ID)
	if env.ID != nil && bytes.Equal(id, null) && env.Method != nil {
		return Message{ID: NullID}, ErrMalformed("id must be an integer or a string, not null")
	}
	if len(id) > 0 && !bytes.Equal(id, null) {
		if e := checkID(id); e != nil {
			return Message{ID: MalformedID}, e
		}
		m.ID = ID(id)
	}
	if p := bytes.TrimSpace(env.Params); len(p) > 0 && !bytes.Equal(p, null) {
		m.Params = p
	}
	switch {
	case env.Method != nil && m.ID != nil:
		m.Kind, m.Method = KindRequest, *env.Method
	case env.Method != nil:
		m.Kind, m.Method = KindNotification, *env.Method
	case m.ID != nil && (env.Result != nil || env.Error != nil):
		m.Kind, m.Result, m.Error = KindResponse, env.Result, env.Error
	default:
		return Message{ID: MalformedID}, ErrMalformed("expected a request, a notification or a response")
	}
	if m.Method == "" && m.Kind != KindResponse {
		return Message{ID: MalformedID}, ErrMalformed("method must not be empty")
	}
	return m, nil
}

// checkID accepts what can be echoed byte for byte into a valid response:
// an integer that fits int64, or a JSON string that is valid UTF-8 (a
// string with invalid UTF-8 would reach the client altered).
func checkID(id []byte) *Error {
	switch id[0] {
	case '"':
		var s string
		if json.Unmarshal(id, &s) != nil {
			return ErrMalformed("id must be an integer or a string")
		}
		if !utf8.Valid(id) {
			return ErrMalformed("id must be valid UTF-8")
		}
		return nil
	default:
		if _, err := strconv.ParseInt(string(id), 10, 64); err != nil {
			return ErrMalformed("id must be an integer or a string")
		}
		return nil
	}
}

// AppendResult appends the response {"id":ID,"result":R} to dst. result is
// marshalled with encoding/json; a json.RawMessage is copied as is.
func AppendResult(dst []byte, id ID, result any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	switch r := result.(type) {
	case json.RawMessage:
		dst = append(dst, r...)
	case nil:
		dst = append(dst, "{}"...)
	default:
		b, err := json.Marshal(r)
		if err != nil {
			return dst, err
		}
		dst = append(dst, b...)
	}
	return append(dst, '}'), nil
}

// AppendError appends the response {"id":ID,"error":{...}} to dst.
func AppendError(dst []byte, id ID, e *Error) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	dst = append(dst, `,"message":`...)
	dst = AppendString(dst, e.Message)
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			dst = append(dst, `,"data":`...)
			dst = append(dst, b...)
		}
	}
	return append(dst, "}}"...)
}

// AppendNotification appends {"method":M,"params":P} to dst.
func AppendNotification(dst []byte, method string, params any) ([]byte, error) {
	dst = append(dst, `{"method":`...)
	dst = AppendString(dst, method)
	dst = append(dst, `,"params":`...)
	b, err := json.Marshal(params)
	if err != nil {
		return dst, err
	}
	dst = append(dst, b...)
	return append(dst, '}'), nil
}

// AppendRequest appends {"id":ID,"method":M,"params":P} to dst (used by clients).
func AppendRequest(dst []byte, id ID, method string, params any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":`...)
	dst = AppendString(dst, method)
	if params != nil {
		dst = append(dst, `,"params":`...)
		b, err := json.Marshal(params)
		if err != nil {
			return dst, err
		}
		dst = append(dst, b...)
	}
	return append(dst, '}'), nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. It escapes what encoding/json
// escapes (control characters, quote, backslash, <, >, &, U+2028, U+2029)
// and replaces invalid UTF-8 with U+FFFD, so its output decodes to the same
// string encoding/json would produce.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// scanEnvelope is Decode's fast path: for a valid JSON object whose
// members are spelled exactly (no escapes in keys, a method string without
// escapes, valid UTF-8) it finds id, method, params, result and error in one scan and
// copies the message once (the caller's buffer is reused by the
// transport), instead of a reflective decode that copies each member. It
// reports false for anything else (invalid JSON, a method that is not a
// plain string, a key that only encoding/json's case-insensitive matching
// would take), which the reflective decode then handles, with its error
// texts. As encoding/json, the last of duplicate members wins.
func scanEnvelope(data []byte, clone bool) (rawEnvelope, bool) {
	var env rawEnvelope
	if !json.Valid(data) {
		return env, false
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return env, false
	}
	if clone {
		data = bytes.Clone(data)
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] == '}' {
			return env, true
		}
		if data[i] == ',' {
			i++
			continue
		}
		end := skipString(data, i)
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return env, false
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // past ':'
		vend := skipValue(data, i)
		val := bytes.TrimRight(data[i:vend], " \t\r\n")
		i = vend
		switch string(key) {
		case "id":
			env.ID = val
		case "method":
			if val[0] != '"' || bytes.IndexByte(val, '\\') >= 0 || !utf8.Valid(val) {
				if bytes.Equal(val, null) {
					env.Method = nil
					continue
				}
				return env, false
			}
			m := string(val[1 : len(val)-1])
			env.Method = &m
		case "params":
			env.Params = val
		case "result":
			env.Result = val
		case "error":
			env.Error = val
		default:
			for _, k := range envelopeKeys {
				if bytes.EqualFold(key, []byte(k)) {
					return env, false
				}
			}
		}
	}
}

// envelopeKeys are the members scanEnvelope takes; a key equal to one of
// them without regard to case goes to the reflective decode.
var envelopeKeys = [...]string{"id", "method", "params", "result", "error"}

// ScanID finds a request's id in the first bytes of a message (the rest
// may be missing: a message refused while it was read). It returns nil
// when the members before the id are cut off or the id is not valid.
func ScanID(prefix []byte) ID {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil
		}
		if key == "id" {
			id := bytes.TrimSpace(val)
			if len(id) == 0 || bytes.Equal(id, null) || checkID(id) != nil {
				return nil
			}
			return ID(bytes.Clone(id))
		}
	}
	return nil
}
