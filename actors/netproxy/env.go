package netproxy

import "strings"

// httpProxyKeys get the HTTP proxy's URL.
var httpProxyKeys = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
	"YARN_HTTP_PROXY", "YARN_HTTPS_PROXY",
	"npm_config_http_proxy", "npm_config_https_proxy", "npm_config_proxy",
	"NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY", "NPM_CONFIG_PROXY",
	"BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY",
	"PIP_PROXY", "DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
	"WS_PROXY", "WSS_PROXY", "ws_proxy", "wss_proxy",
}

// noProxyKeys are set empty: everything goes through the proxy.
var noProxyKeys = []string{
	"NO_PROXY", "no_proxy", "npm_config_noproxy", "NPM_CONFIG_NOPROXY", "BUNDLE_NO_PROXY",
}

// allProxyKeys get the SOCKS5 URL (socks5h: names resolved by the proxy)
// when SOCKS5 is on, else the HTTP proxy's URL.
var allProxyKeys = []string{"ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"}

// EnvKeys are every variable Env sets, so a caller can drop inherited
// ones before adding these.
func EnvKeys() []string {
	out := []string{"CODEX_NETWORK_PROXY_ACTIVE", "CODEX_NETWORK_ALLOW_LOCAL_BINDING",
		"ELECTRON_GET_USE_PROXY", "NODE_USE_ENV_PROXY"}
	out = append(out, httpProxyKeys...)
	out = append(out, noProxyKeys...)
	return append(out, allProxyKeys...)
}

// Env is the proxy environment of a command (KEY=VALUE, the order of
// EnvKeys): httpAddr and socksAddr are host:port as the command reaches
// them; socksAddr is "" when SOCKS5 is off.
func Env(httpAddr, socksAddr string, allowLocalBinding bool) []string {
	httpURL := "http://" + httpAddr
	all := httpURL
	if socksAddr != "" {
		all = "socks5h://" + socksAddr
	}
	local := "0"
	if allowLocalBinding {
		local = "1"
	}
	out := []string{
		"CODEX_NETWORK_PROXY_ACTIVE=1",
		"CODEX_NETWORK_ALLOW_LOCAL_BINDING=" + local,
		"ELECTRON_GET_USE_PROXY=true",
		"NODE_USE_ENV_PROXY=1",
	}
	for _, k := range httpProxyKeys {
		out = append(out, k+"="+httpURL)
	}
	for _, k := range noProxyKeys {
		out = append(out, k+"=")
	}
	for _, k := range allProxyKeys {
		out = append(out, k+"="+all)
	}
	return out
}

// MergeEnv returns base without any variable Env sets, followed by add.
func MergeEnv(base, add []string) []string {
	drop := map[string]bool{}
	for _, k := range EnvKeys() {
		drop[k] = true
	}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}
