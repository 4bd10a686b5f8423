package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Params is implemented by every params struct: it names the fields that
// must be present and non-null.
type Params interface {
	RequiredFields() []string
}

// DecodeParams decodes raw (nil meaning null) into dst and checks dst's
// required fields. Errors are -32602 and name the offending field, e.g.
// "missing field `processId`" or "invalid type for field `argv`: expected
// array of string, got string". Unknown fields are ignored.
func DecodeParams(raw json.RawMessage, dst Params) *Error {
	req := dst.RequiredFields()
	if len(raw) == 0 {
		if len(req) > 0 {
			return ErrMissingField(req[0])
		}
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return paramError(err, dst)
	}
	if len(req) > 0 {
		missing, ok := firstMissing(raw, req)
		if !ok {
			return Errorf(CodeInvalidParams, "invalid params: expected an object")
		}
		if missing != "" {
			return ErrMissingField(missing)
		}
	}
	return nil
}

func paramError(err error, dst Params) *Error {
	var te *json.UnmarshalTypeError
	var b64 *base64Error
	var se *json.SyntaxError
	switch {
	case errors.As(err, &b64):
		if b64.field == "" {
			b64.field = "chunk"
			if f, ok := dst.(interface{ Base64Field() string }); ok {
				b64.field = f.Base64Field()
			}
		}
		return Errorf(CodeInvalidParams, "invalid base64 in field `%s`: %v", b64.field, b64.err)
	case errors.As(err, &te):
		if te.Field == "" {
			return Errorf(CodeInvalidParams, "invalid params: expected %s, got %s", typeName(te.Type), te.Value)
		}
		return Errorf(CodeInvalidParams, "invalid type for field `%s`: expected %s, got %s", te.Field, typeName(te.Type), te.Value)
	case errors.As(err, &se):
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	default:
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t == reflect.TypeOf(Base64{}) {
			return "base64 string"
		}
		return "array of " + typeName(t.Elem())
	case reflect.Map:
		return "object of " + typeName(t.Elem())
	case reflect.Struct:
		return "object"
	}
	return t.String()
}

// firstMissing returns the first of req (at most 64 names) that is not a
// key of the JSON object raw with a non-null value ("" when all are
// there). raw has already been validated by encoding/json; this is a
// single linear scan that never copies values (a write's base64 chunk can
// be megabytes) and allocates only for a key written with escapes.
func firstMissing(raw []byte, req []string) (string, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return "", false
	}
	var found uint64
	i++
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			break
		}
		if raw[i] == ',' {
			i++
			continue
		}
		end := skipString(raw, i)
		key := raw[i+1 : max(i+1, end-1)]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if err := json.Unmarshal(raw[i:end], &k); err != nil {
				return "", false
			}
			key = []byte(k)
		}
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ':' {
			i++
		}
		i = skipSpace(raw, i)
		if len(raw)-i < 4 || string(raw[i:i+4]) != "null" {
			for n, f := range req {
				if string(key) == f {
					found |= 1 << n
				}
			}
		}
		i = skipValue(raw, i)
	}
	for n, f := range req {
		if found&(1<<n) == 0 {
			return f, true
		}
	}
	return "", true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"'.
// It jumps between quotes with bytes.IndexByte (a base64 chunk can be
// hundreds of kilobytes) and skips quotes escaped by an odd run of backslashes.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		k := i + j
		bs := 0
		for m := k - 1; m >= i && b[m] == '\\'; m-- {
			bs++
		}
		if bs%2 == 0 {
			return k + 1
		}
		i = k + 1
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// Base64 is a byte payload carried as standard base64 with padding.
type Base64 []byte

// MarshalJSON encodes b as a base64 JSON string.
func (b Base64) MarshalJSON() ([]byte, error) {
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))+2)
	out = append(out, '"')
	out = AppendBase64(out, b)
	return append(out, '"'), nil
}

type base64Error struct {
	field string
	err   error
}

func (e *base64Error) Error() string { return fmt.Sprintf("base64 field %s: %v", e.field, e.err) }

// decodeBase64Field decodes a JSON string of base64 for the named field.
func decodeBase64Field(field string, data []byte) (Base64, error) {
	if string(data) == "null" {
		return nil, nil
	}
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return nil, &base64Error{field: field, err: errors.New("expected a base64 string")}
	}
	s := data[1 : len(data)-1]
	for _, c := range s {
		if c == '\\' { // JSON escapes such as \/ are legal inside the string
			var str string
			if err := json.Unmarshal(data, &str); err != nil {
				return nil, &base64Error{field: field, err: err}
			}
			s = []byte(str)
			break
		}
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(out, s)
	if err != nil {
		return nil, &base64Error{field: field, err: err}
	}
	return out[:n], nil
}

// UnmarshalJSON decodes a base64 JSON string; a decode failure names the
// field through the enclosing params' Base64Field.
func (b *Base64) UnmarshalJSON(data []byte) error {
	v, err := decodeBase64Field("", data)
	if err != nil {
		return err
	}
	*b = v
	return nil
}
