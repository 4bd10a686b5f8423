package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseNetworkProxy(t *testing.T) {
	full := `{"proxy":{"enabled":true,"enableSocks5":true,"enableSocks5Udp":false,"allowUpstreamProxy":false,
		"dangerouslyAllowAllUnixSockets":false,"mode":"limited","domains":{"pypi.org":"allow","*.evil.test":"deny","**.pythonhosted.org":"allow","quiet.test":"none"},
		"unixSockets":{},"allowLocalBinding":true,"credentialMasking":{"x":1}},
		"auditMetadata":{"conversationId":"c1","appVersion":"0.171.0"},"environmentId":"local","executionId":"e1","policyDecisionTimeoutMs":1500}`
	np, err := ParseNetworkProxy(json.RawMessage(full))
	if err != nil {
		t.Fatal(err)
	}
	if !np.Enabled || !np.EnableSOCKS5 || np.EnableSOCKS5UDP || !np.Limited || !np.AllowLocalBinding ||
		strings.Join(np.Allow, ",") != "**.pythonhosted.org,pypi.org" || strings.Join(np.Deny, ",") != "*.evil.test" ||
		np.ExecutionID != "e1" || np.PolicyDecisionTimeoutMs != 1500 {
		t.Fatalf("parsed %+v", np)
	}
	if np, err := ParseNetworkProxy(json.RawMessage(`null`)); np != nil || err != nil {
		t.Fatalf("null: %v %v", np, err)
	}
	const req = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"allowLocalBinding":false,"mode":"full"`
	const noLocal = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"mode":"full"`
	const noMode = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"allowLocalBinding":false`
	bad := map[string]string{
		`[]`:                          "`networkProxy`",
		`{}`:                          "`networkProxy.proxy`",
		`{"proxy":[]}`:                "`networkProxy.proxy`",
		`{"proxy":{}}`:                "missing field `networkProxy.proxy.enabled`",
		`{"proxy":{"enabled":"yes"}}`: "`networkProxy.proxy.enabled`",
		`{"proxy":{` + noLocal + `}}`: "missing field `networkProxy.proxy.allowLocalBinding`",
		`{"proxy":{` + noMode + `}}`:  "missing field `networkProxy.proxy.mode`",
		`{"proxy":{` + req + `,"enableSocks5Udp":1}}`:          "`networkProxy.proxy.enableSocks5Udp`",
		`{"proxy":{` + req + `,"mode":"open"}}`:                "`networkProxy.proxy.mode`",
		`{"proxy":{` + req + `,"domains":["a"]}}`:              "`networkProxy.proxy.domains`",
		`{"proxy":{` + req + `,"domains":{"a.test":"maybe"}}}`: "networkProxy.proxy.domains[\"a.test\"]",
		`{"proxy":{` + req + `,"domains":{"a.test":true}}}`:    "networkProxy.proxy.domains[\"a.test\"]",
		`{"proxy":{` + req + `,"unixSockets":["/x"]}}`:         "`networkProxy.proxy.unixSockets`",
		`{"proxy":{` + req + `},"auditMetadata":3}`:            "`networkProxy.auditMetadata`",
		`{"proxy":{` + req + `},"executionId":3}`:              "`networkProxy.executionId`",
		`{"proxy":{` + req + `},"policyDecisionTimeoutMs":-1}`: "`networkProxy.policyDecisionTimeoutMs`",
		`{"proxy":{` + req + `,"allowLocalBinding":"true"}}`:   "`networkProxy.proxy.allowLocalBinding`",
	}
	if np, err := ParseNetworkProxy(json.RawMessage(`{"proxy":{` + req + `,"bogus":1}}`)); err != nil || np == nil {
		t.Errorf("unknown fields are ignored: %v", err)
	}
	for in, field := range bad {
		_, err := ParseNetworkProxy(json.RawMessage(in))
		if err == nil || err.Code != CodeInvalidParams || !strings.Contains(err.Message, field) {
			t.Errorf("%s: %v, want -32602 naming %s", in, err, field)
		}
	}
}

func TestPolicyRequestResult(t *testing.T) {
	for in, want := range map[string]struct {
		allow  bool
		reason string
	}{
		`{"decision":{"type":"allow"}}`:                {true, ""},
		`{"decision":{"type":"deny","reason":"nope"}}`: {false, "nope"},
		`{"decision":{"type":"deny"}}`:                 {false, "denied"},
		`{"decision":{"type":"ask"}}`:                  {false, "denied"},
		`{"decision":{"type":"sure"}}`:                 {false, "not_allowed"},
		`{"decision":"allow"}`:                         {false, "not_allowed"},
		`null`:                                         {false, "not_allowed"},
	} {
		a, r := ParsePolicyRequestResult(json.RawMessage(in))
		if a != want.allow || r != want.reason {
			t.Errorf("%s: %v %q", in, a, r)
		}
	}
}
