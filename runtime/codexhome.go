package runtime

import (
	"context"
	"encoding/json"
	"os"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/wire"
)

// What the executor's own Codex installation holds (PROTOCOL.md section
// 7.6): its configuration layers and its installed skills and plugins, as
// environmentConfig/read and capabilities/discoverV2 answer them. Local reads
// this machine (its CODEX_HOME, else ~/.codex, and Config.CodexSystemDir);
// Client asks the server. Errors are *RPCError with the protocol's codes.

// CodexConfigQuery selects what environmentConfig/read returns: Cwd is an
// absolute path or file: URI; each path is a list of TOML keys (at least one
// path in all).
type CodexConfigQuery struct {
	Cwd               string     // the directory the configuration is read for
	ConfigPaths       [][]string // key paths kept of the config layers
	RequirementsPaths [][]string // key paths kept of the requirements layers
}

func (q CodexConfigQuery) params() wire.EnvironmentConfigReadParams {
	p := wire.EnvironmentConfigReadParams{Cwd: q.Cwd, ConfigPaths: q.ConfigPaths, RequirementsPaths: q.RequirementsPaths}
	if p.ConfigPaths == nil {
		p.ConfigPaths = [][]string{}
	}
	if p.RequirementsPaths == nil {
		p.RequirementsPaths = [][]string{}
	}
	return p
}

// localCall runs one of the section 7.6 handlers with params marshalled as
// a client would send them.
func localCall(ctx context.Context, params any, out any, handle func(json.RawMessage) (any, *wire.Error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	res, werr := handle(raw)
	if werr != nil {
		return rpcErr(werr)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// CodexConfig reads this machine's Codex configuration layers
// (environmentConfig/read).
func (l *Local) CodexConfig(ctx context.Context, q CodexConfigQuery) (wire.EnvironmentConfigReadResult, error) {
	var res wire.EnvironmentConfigReadResult
	err := localCall(ctx, q.params(), &res, func(raw json.RawMessage) (any, *wire.Error) {
		return actors.EnvironmentConfigRead(raw, l.codexSystemDir, os.Environ())
	})
	return res, err
}

// CodexConfig asks the server for its Codex configuration layers.
func (c *Client) CodexConfig(ctx context.Context, q CodexConfigQuery) (wire.EnvironmentConfigReadResult, error) {
	var res wire.EnvironmentConfigReadResult
	err := c.call(ctx, wire.MethodEnvironmentConfigRead, q.params(), &res)
	return res, err
}

// DiscoverCapabilities lists the skills and plugins installed on this
// machine (capabilities/discoverV2, no sandbox).
func (l *Local) DiscoverCapabilities(ctx context.Context, cwd string) (wire.DiscoverV2Result, error) {
	var res wire.DiscoverV2Result
	err := localCall(ctx, wire.DiscoverV2Params{Cwd: cwd}, &res, func(raw json.RawMessage) (any, *wire.Error) {
		return actors.DiscoverV2(raw, l.codexSystemDir, os.Environ())
	})
	return res, err
}

// DiscoverCapabilities asks the server for its installed skills and plugins.
func (c *Client) DiscoverCapabilities(ctx context.Context, cwd string) (wire.DiscoverV2Result, error) {
	var res wire.DiscoverV2Result
	err := c.call(ctx, wire.MethodCapabilitiesDiscoverV2, wire.DiscoverV2Params{Cwd: cwd}, &res)
	return res, err
}
