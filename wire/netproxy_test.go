package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseNetworkProxy(t *testing.T) {
	full := `{"proxy":{"enabled":true,"enableSocks5":true,"enableSocks5Udp":false,"allowUpstreamProxy":false,
		"dangerouslyAllowAllUnixSockets":false,"mode":"limited","domains":{"pypi.org":"allow","*.evil.test":"deny","**.pythonhosted.org":"allow"},
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
	bad := map[string]string{
		`[]`:                              "`networkProxy`",
		`{}`:                              "`networkProxy.proxy`",
		`{"proxy":[]}`:                    "`networkProxy.proxy`",
		`{"proxy":{"enabled":"yes"}}`:     "`networkProxy.proxy.enabled`",
		`{"proxy":{"enableSocks5Udp":1}}`: "`networkProxy.proxy.enableSocks5Udp`",
		`{"proxy":{"mode":"open"}}`:       "`networkProxy.proxy.mode`",
		`{"proxy":{"domains":["a"]}}`:     "`networkProxy.proxy.domains`",
		`{"proxy":{"domains":{"a.test":"maybe"}}}`:  "networkProxy.proxy.domains[\"a.test\"]",
		`{"proxy":{"domains":{"a.test":true}}}`:     "networkProxy.proxy.domains[\"a.test\"]",
		`{"proxy":{"unixSockets":"x"}}`:             "`networkProxy.proxy.unixSockets`",
		`{"proxy":{},"auditMetadata":3}`:            "`networkProxy.auditMetadata`",
		`{"proxy":{},"executionId":3}`:              "`networkProxy.executionId`",
		`{"proxy":{},"policyDecisionTimeoutMs":-1}`: "`networkProxy.policyDecisionTimeoutMs`",
		`{"proxy":{"allowLocalBinding":"true"}}`:    "`networkProxy.proxy.allowLocalBinding`",
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
