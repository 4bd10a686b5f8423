package actors

import (
	"encoding/json"
	"testing"
)

// A connection parses a sandbox object once while its client keeps
// sending the same one; a different object, or a bad one, is parsed (and
// refused) as it comes.
func TestSandboxCache(t *testing.T) {
	var c sandboxCache
	ro := json.RawMessage(`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}}}`)
	open := json.RawMessage(`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}}}`)
	a, err := c.parse(ro)
	if err != nil || a == nil || a.Network {
		t.Fatalf("parse: %+v %v", a, err)
	}
	b, _ := c.parse(append(json.RawMessage(nil), ro...))
	if b != a {
		t.Fatal("the same object was parsed again")
	}
	d, _ := c.parse(open)
	if d == a || !d.Network {
		t.Fatalf("a different object got the cached parse: %+v", d)
	}
	bad := json.RawMessage(`{"permissions":{"type":"managed","network":"sometimes"}}`)
	for range 2 {
		if _, err := c.parse(bad); err == nil {
			t.Fatal("a bad sandbox was accepted")
		}
	}
	if e, _ := c.parse(open); e != d {
		t.Fatal("a refused object replaced the cached parse")
	}
}
