package wire

import (
	"encoding/json"
	"strconv"
)

// http/request (PROTOCOL.md section 7.4).
const (
	MethodHTTPRequest          = "http/request"
	NotifyHTTPRequestBodyDelta = "http/request/bodyDelta"
)

// HTTPHeader is one request or response header; repeated names are kept.
// ValueEnvVar (requests only, capability httpHeaderEnvVars) names an
// executor environment variable whose value is appended to Value.
type HTTPHeader struct {
	Name        string  `json:"name"`
	Value       string  `json:"value"`
	ValueEnvVar *string `json:"valueEnvVar,omitempty"`
}

// HTTPRequestParams are the params of http/request. A nil TimeoutMs means
// no timeout; 0 times out at once.
type HTTPRequestParams struct {
	Method         string       `json:"method"`
	URL            string       `json:"url"`
	Headers        []HTTPHeader `json:"headers"`
	BodyBase64     Base64       `json:"bodyBase64"`
	TimeoutMs      *uint64      `json:"timeoutMs"`
	RequestID      string       `json:"requestId"`
	StreamResponse bool         `json:"streamResponse"`
	// RedirectPolicy is "follow" (absent: the default) or "stop"; see
	// StopRedirects.
	RedirectPolicy json.RawMessage `json:"redirectPolicy,omitempty"`
}

// StopRedirects reads RedirectPolicy: true for "stop", false when absent
// or "follow"; anything else is -32602 with the reference's text.
func (p *HTTPRequestParams) StopRedirects() (bool, *Error) {
	if len(p.RedirectPolicy) == 0 {
		return false, nil
	}
	var s string
	if string(p.RedirectPolicy) == "null" {
		return false, Errorf(CodeInvalidParams, "invalid type: null, expected string or map")
	}
	if err := json.Unmarshal(p.RedirectPolicy, &s); err != nil {
		return false, Errorf(CodeInvalidParams, "invalid type for field `redirectPolicy`: expected `follow` or `stop`")
	}
	switch s {
	case "follow":
		return false, nil
	case "stop":
		return true, nil
	}
	return false, Errorf(CodeInvalidParams, "unknown variant `%s`, expected `follow` or `stop`", s)
}

func (*HTTPRequestParams) RequiredFields() []string { return []string{"method", "url", "requestId"} }
func (*HTTPRequestParams) Base64Field() string      { return "bodyBase64" }

// HTTPResponse is the result of http/request. With streamResponse the body
// is empty and follows as http/request/bodyDelta notifications.
type HTTPResponse struct {
	Status     int          `json:"status"`
	Headers    []HTTPHeader `json:"headers"`
	BodyBase64 Base64       `json:"bodyBase64"`
}

// HTTPBodyDelta is http/request/bodyDelta, for clients that decode it.
type HTTPBodyDelta struct {
	RequestID   string  `json:"requestId"`
	Seq         uint64  `json:"seq"`
	DeltaBase64 Base64  `json:"deltaBase64"`
	Done        bool    `json:"done"`
	Error       *string `json:"error"`
}

// AppendHTTPBodyDelta appends an http/request/bodyDelta notification to dst,
// base64-encoding delta straight into it. errText is sent only when done
// (nil error otherwise).
func AppendHTTPBodyDelta(dst []byte, requestID string, seq uint64, delta []byte, done bool, errText string) []byte {
	dst = append(dst, `{"method":"http/request/bodyDelta","params":{"requestId":`...)
	dst = AppendString(dst, requestID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"deltaBase64":"`...)
	dst = AppendBase64(dst, delta)
	dst = append(dst, `","done":`...)
	dst = strconv.AppendBool(dst, done)
	dst = append(dst, `,"error":`...)
	if done && errText != "" {
		dst = AppendString(dst, errText)
	} else {
		dst = append(dst, `null`...)
	}
	return append(dst, `}}`...)
}
