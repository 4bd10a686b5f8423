package main_test

// A scripted stand-in for the OpenAI Responses API, for driving the real Codex CLI in e2e_codex_test.go.
// Codex POSTs the whole conversation to {base_url}/responses for every model turn and reads the answer
// as a server-sent event stream; the mock answers the n-th request with the n-th scripted turn, and
// keeps every request so a test can check what the agent sent back (function_call_output items).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// modelTurn scripts one answer of the model. It receives the request that asked for it (so it can read
// earlier tool outputs, e.g. a session id) and returns the output items to stream. It runs on the
// mock's handler goroutine: it may act on the world (drop a connection, create a release file) but
// must not call t.Fatal; the test asserts on the recorded requests once codex has exited.
type modelTurn func(req *modelRequest) []sseEvent

// sseEvent is one Responses API stream event; its "type" field names it.
type sseEvent map[string]any

// modelRequest is one request codex sent to the mock.
type modelRequest struct {
	Method string
	Path   string
	Body   map[string]any // nil when the body is not JSON
	Raw    []byte
}

// responsesMock serves the script. mu guards requests, next and problems: handlers run on the HTTP
// server's goroutines, the test reads after codex has exited.
type responsesMock struct {
	srv    *httptest.Server
	script []modelTurn

	mu       sync.Mutex
	requests []*modelRequest
	next     int      // index of the next turn to play
	problems []string // requests the script did not expect
}

// newResponsesMock starts the mock on 127.0.0.1 and closes it when the test ends.
func newResponsesMock(t *testing.T, script ...modelTurn) *responsesMock {
	t.Helper()
	m := &responsesMock{script: script}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

// baseURL is what codex's model_providers.<id>.base_url must be.
func (m *responsesMock) baseURL() string { return m.srv.URL + "/v1" }

func (m *responsesMock) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	req := &modelRequest{Method: r.Method, Path: r.URL.Path, Raw: raw}
	if err == nil && json.Unmarshal(raw, &req.Body) != nil {
		req.Body = nil
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	var turn modelTurn
	problem := ""
	switch {
	case err != nil:
		problem = fmt.Sprintf("%s %s: reading the body: %v", r.Method, r.URL.Path, err)
	case r.Method != http.MethodPost || r.URL.Path != "/v1/responses":
		problem = fmt.Sprintf("unexpected request %s %s", r.Method, r.URL.Path)
	case r.Header.Get("Content-Encoding") != "" && r.Header.Get("Content-Encoding") != "identity":
		problem = fmt.Sprintf("request body encoded as %q: the mock reads plain JSON", r.Header.Get("Content-Encoding"))
	case req.Body == nil:
		problem = "request body is not JSON"
	case m.next >= len(m.script):
		problem = fmt.Sprintf("model request %d is past the end of the %d-turn script", m.next+1, len(m.script))
	default:
		turn = m.script[m.next]
	}
	n := m.next
	m.next++
	if problem != "" {
		m.problems = append(m.problems, problem)
	}
	m.mu.Unlock()
	if turn == nil {
		// Answer anyway (with a final message) so codex ends its turn instead of retrying.
		if r.URL.Path != "/v1/responses" {
			http.NotFound(w, r)
			return
		}
		writeSSE(w, n, []sseEvent{evMessage("the mock model has no more turns")})
		return
	}
	writeSSE(w, n, turn(req))
}

// writeSSE streams one response the way the Responses API does: response.created, the output items,
// response.completed, each as an `event:`/`data:` pair flushed as it is written.
func writeSSE(w http.ResponseWriter, n int, items []sseEvent) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	id := fmt.Sprintf("resp_mock_%d", n+1)
	events := append([]sseEvent{{"type": "response.created", "response": map[string]any{"id": id}}}, items...)
	events = append(events, sseEvent{"type": "response.completed", "response": map[string]any{
		"id": id,
		"usage": map[string]any{
			"input_tokens": 0, "input_tokens_details": nil, "output_tokens": 0,
			"output_tokens_details": nil, "total_tokens": 0,
		},
	}})
	flusher, _ := w.(http.Flusher)
	for _, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			panic(err) // events are built from plain maps in this file
		}
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// evFunctionCall is a completed function_call output item (exec_command, write_stdin, ...).
func evFunctionCall(callID, name string, args map[string]any) sseEvent {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return sseEvent{"type": "response.output_item.done", "item": map[string]any{
		"type": "function_call", "call_id": callID, "name": name, "arguments": string(b),
	}}
}

// evCustomToolCall is a completed custom (freeform) tool call, the form apply_patch takes.
func evCustomToolCall(callID, name, input string) sseEvent {
	return sseEvent{"type": "response.output_item.done", "item": map[string]any{
		"type": "custom_tool_call", "call_id": callID, "name": name, "input": input,
	}}
}

// evMessage is a final assistant message: a turn made only of it ends codex's task.
func evMessage(text string) sseEvent {
	return sseEvent{"type": "response.output_item.done", "item": map[string]any{
		"type": "message", "role": "assistant", "id": "msg_mock",
		"content": []any{map[string]any{"type": "output_text", "text": text}},
	}}
}

// ---- scripting helpers ----

func turnOf(events ...sseEvent) modelTurn {
	return func(*modelRequest) []sseEvent { return events }
}

func execCommand(callID string, args map[string]any) modelTurn {
	return turnOf(evFunctionCall(callID, "exec_command", args))
}

func applyPatch(callID, patch string) modelTurn {
	return turnOf(evCustomToolCall(callID, "apply_patch", patch))
}

func finalMessage(text string) modelTurn { return turnOf(evMessage(text)) }

// ---- reading what codex sent ----

// all returns the requests received so far and the problems seen.
func (m *responsesMock) all() ([]*modelRequest, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*modelRequest(nil), m.requests...), append([]string(nil), m.problems...)
}

// input is the request's conversation (the "input" array).
func (r *modelRequest) input() []map[string]any {
	items, _ := r.Body["input"].([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// callOutput is the output codex reported for callID (a function_call_output or
// custom_tool_call_output item), as text.
func (r *modelRequest) callOutput(callID string) (string, bool) {
	for _, it := range r.input() {
		typ, _ := it["type"].(string)
		if (typ == "function_call_output" || typ == "custom_tool_call_output") && it["call_id"] == callID {
			return outputText(it["output"]), true
		}
	}
	return "", false
}

// outputText flattens an output that is either a string or a list of content items.
func outputText(v any) string {
	switch o := v.(type) {
	case string:
		return o
	case []any:
		var b strings.Builder
		for _, part := range o {
			if p, ok := part.(map[string]any); ok {
				if s, ok := p["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// output finds callID's output in the requests received so far (the latest request that has it).
func (m *responsesMock) output(callID string) (string, bool) {
	reqs, _ := m.all()
	for i := len(reqs) - 1; i >= 0; i-- {
		if out, ok := reqs[i].callOutput(callID); ok {
			return out, true
		}
	}
	return "", false
}

// promptText concatenates every input text of the first model request (instructions, skills list,
// environment context, user prompt).
func (m *responsesMock) promptText() string {
	reqs, _ := m.all()
	if len(reqs) == 0 {
		return ""
	}
	var b strings.Builder
	if s, ok := reqs[0].Body["instructions"].(string); ok {
		b.WriteString(s)
	}
	for _, it := range reqs[0].input() {
		content, _ := it["content"].([]any)
		for _, c := range content {
			if cm, ok := c.(map[string]any); ok {
				if s, ok := cm["text"].(string); ok {
					b.WriteString(s)
					b.WriteByte('\n')
				}
			}
		}
	}
	return b.String()
}

// toolNames lists the tools codex offered the model in its first request.
func (m *responsesMock) toolNames() []string {
	reqs, _ := m.all()
	if len(reqs) == 0 {
		return nil
	}
	tools, _ := reqs[0].Body["tools"].([]any)
	var names []string
	for _, tl := range tools {
		if tm, ok := tl.(map[string]any); ok {
			if s, ok := tm["name"].(string); ok {
				names = append(names, s)
			}
		}
	}
	return names
}
