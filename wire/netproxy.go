package wire

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Managed network (PROTOCOL.md section 7.5).
const (
	// NotifyNetworkPolicyDecision is the server's notification of one
	// decision of a command's proxy.
	NotifyNetworkPolicyDecision = "network/policyDecision"
	// ServerRequestNetworkPolicy is the server's request to the client
	// about a destination the policy does not cover.
	ServerRequestNetworkPolicy = "network/policyRequest"
)

// NetworkProxy is process/start's networkProxy after ParseNetworkProxy.
type NetworkProxy struct {
	Enabled         bool
	EnableSOCKS5    bool
	EnableSOCKS5UDP bool
	// AllowUpstreamProxy is accepted and has no effect: the proxy never
	// chains to another proxy (none is configured on the executor).
	AllowUpstreamProxy bool
	// DangerouslyAllowAllUnixSockets and UnixSockets are accepted and, as
	// in the reference on Linux, grant nothing: unix sockets are files,
	// governed by the file-system sandbox.
	DangerouslyAllowAllUnixSockets bool
	Limited                        bool // mode "limited"
	Allow, Deny                    []string
	AllowLocalBinding              bool
	TransparentTCP                 bool
	// PolicyDecisionTimeoutMs is the start's policyDecisionTimeoutMs (0:
	// absent, the default applies).
	PolicyDecisionTimeoutMs uint64
	// EnvironmentID, ExecutionID and AuditMetadata are kept for the logs.
	EnvironmentID, ExecutionID string
	AuditMetadata              map[string]json.RawMessage
}

// ParseNetworkProxy validates raw (process/start's networkProxy) strictly:
// absent or null gives nil; a field of the wrong type, an unknown mode or
// a domain decision other than allow/deny is -32602 naming the field.
// Unknown fields are ignored, as in the sandbox object. Patterns are
// checked by the caller (the policy compiler), which names
// networkProxy.proxy.domains.
func ParseNetworkProxy(raw json.RawMessage) (*NetworkProxy, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	top, err := object(raw, "networkProxy")
	if err != nil {
		return nil, err
	}
	np := &NetworkProxy{}
	proxyRaw, ok := top["proxy"]
	if !ok || isNull(proxyRaw) {
		return nil, ErrMissingField("networkProxy.proxy")
	}
	px, err := object(proxyRaw, "networkProxy.proxy")
	if err != nil {
		return nil, err
	}
	const p = "networkProxy.proxy"
	// Required as the reference requires them; transparentTcp (0.171) is
	// optional.
	for _, b := range []struct {
		key      string
		dst      *bool
		required bool
	}{
		{"enabled", &np.Enabled, true}, {"enableSocks5", &np.EnableSOCKS5, true}, {"enableSocks5Udp", &np.EnableSOCKS5UDP, true},
		{"allowUpstreamProxy", &np.AllowUpstreamProxy, true},
		{"dangerouslyAllowAllUnixSockets", &np.DangerouslyAllowAllUnixSockets, true},
		{"allowLocalBinding", &np.AllowLocalBinding, true}, {"transparentTcp", &np.TransparentTCP, false},
	} {
		if v, ok := px[b.key]; b.required && (!ok || isNull(v)) {
			return nil, ErrMissingField(p + "." + b.key)
		}
		if err := optBool(px, b.key, p, b.dst); err != nil {
			return nil, err
		}
	}
	mode, err := enum(px, "mode", p, "full", "limited")
	if err != nil {
		return nil, err
	}
	np.Limited = mode == "limited"
	if v, ok := px["domains"]; ok && !isNull(v) {
		var doms map[string]json.RawMessage
		if e := json.Unmarshal(v, &doms); e != nil || doms == nil {
			return nil, badField(p+".domains", "expected an object of pattern: \"allow\"|\"deny\"")
		}
		for pat, d := range doms {
			var s string
			if e := json.Unmarshal(d, &s); e != nil || (s != "allow" && s != "deny" && s != "none") {
				return nil, badField(fmt.Sprintf("%s.domains[%q]", p, pat), "unknown variant, expected one of `none`, `allow`, `deny`")
			}
			switch s {
			case "allow":
				np.Allow = append(np.Allow, pat)
			case "deny":
				np.Deny = append(np.Deny, pat)
			} // "none": the pattern says nothing
		}
		sort.Strings(np.Allow)
		sort.Strings(np.Deny)
	}
	if v, ok := px["unixSockets"]; ok && !isNull(v) {
		if _, err := object(v, p+".unixSockets"); err != nil {
			return nil, err
		}
	}
	if v, ok := top["policyDecisionTimeoutMs"]; ok && !isNull(v) {
		if e := json.Unmarshal(v, &np.PolicyDecisionTimeoutMs); e != nil {
			return nil, badField("networkProxy.policyDecisionTimeoutMs", "expected a non-negative integer")
		}
	}
	if err := optString(top, "environmentId", "networkProxy", &np.EnvironmentID); err != nil {
		return nil, err
	}
	if err := optString(top, "executionId", "networkProxy", &np.ExecutionID); err != nil {
		return nil, err
	}
	if v, ok := top["auditMetadata"]; ok && !isNull(v) {
		if e := json.Unmarshal(v, &np.AuditMetadata); e != nil {
			return nil, badField("networkProxy.auditMetadata", "expected an object")
		}
	}
	return np, nil
}

func optBool(obj map[string]json.RawMessage, key, parent string, dst *bool) *Error {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return badField(parent+"."+key, "expected a boolean")
	}
	return nil
}

// ErrNetworkPattern: a domain pattern the policy cannot use.
func ErrNetworkPattern(field, pattern, why string) *Error {
	return Errorf(CodeInvalidParams, "invalid field `%s`: pattern %q: %s", field, pattern, why)
}

// ErrNetworkProxyStart: the proxy of a start could not be started; the
// command is not run (never with an open network).
func ErrNetworkProxyStart(reason string) *Error {
	return Errorf(CodeInternal, "network proxy could not be started: %s", reason)
}

// PolicyTimestampLayout is network/policyDecision's timestamp format.
const PolicyTimestampLayout = "2006-01-02T15:04:05.000Z"

// PolicyDecisionParams are network/policyDecision's params.
type PolicyDecisionParams struct {
	ProcessID      string  `json:"processId"`
	Timestamp      string  `json:"timestamp"` // RFC 3339 UTC with milliseconds (PolicyTimestampLayout)
	Scope          string  `json:"scope"`     // "domain"
	Decision       string  `json:"decision"`  // "allow" | "deny"
	Source         string  `json:"source"`
	Reason         string  `json:"reason"`
	Protocol       string  `json:"protocol"`
	Host           string  `json:"host"`
	Port           int     `json:"port"`
	Method         *string `json:"method,omitempty"` // absent for SOCKS5, as the reference sends it
	Client         *string `json:"client,omitempty"`
	PolicyOverride bool    `json:"policyOverride"`
}

// PolicyRequestParams are network/policyRequest's params.
type PolicyRequestParams struct {
	ProcessID string              `json:"processId"`
	Request   PolicyRequestTarget `json:"request"`
}

// PolicyRequestTarget is the destination asked about.
type PolicyRequestTarget struct {
	Protocol string `json:"protocol"` // http | https_connect | socks5_tcp | socks5_udp
	Host     string `json:"host"`
	Port     int    `json:"port"`
}

// PolicyRequestResult is the client's answer to network/policyRequest.
type PolicyRequestResult struct {
	Decision struct {
		Type   string  `json:"type"` // allow | deny | ask
		Reason *string `json:"reason,omitempty"`
	} `json:"decision"`
}

// ParsePolicyRequestResult reads the client's answer: allow is true only
// for {"decision":{"type":"allow"}}; "deny", "ask" and anything
// malformed are a deny (malformed with a reason saying so).
func ParsePolicyRequestResult(raw json.RawMessage) (allow bool, reason string) {
	var r PolicyRequestResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return false, "not_allowed"
	}
	if r.Decision.Reason != nil {
		reason = *r.Decision.Reason
	}
	switch r.Decision.Type {
	case "allow":
		return true, reason
	case "deny", "ask":
		if reason == "" {
			reason = "denied"
		}
		return false, reason
	}
	return false, "not_allowed"
}
