package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/renameio/v2"
	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/pluginhost"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// pluginKindsFile, in the state directory, remembers which kinds each
// plugin file served when bcd last ran it. After a restart, a plugin that
// is refused (a stale pin, a file made writable) never starts, so only
// this file can say which kinds the refusal took away: Hello names them,
// and a command of such a kind says, in the API, which file to fix.
const pluginKindsFile = "plugin-kinds.json"

// rememberPluginKinds records the kinds of the plugins the host runs now,
// keeping what it knew of the others (a refused file keeps its last kinds).
func rememberPluginKinds(logger hclog.Logger, stateDir string, host *pluginhost.Host) {
	if stateDir == "" {
		return
	}
	known := readPluginKinds(stateDir)
	changed := false
	for _, p := range host.Plugins() {
		if !equalStrings(known[p.Name], p.Kinds) {
			known[p.Name], changed = append([]string(nil), p.Kinds...), true
		}
	}
	if !changed {
		return
	}
	b, err := json.MarshalIndent(known, "", "  ")
	if err == nil {
		err = renameio.WriteFile(filepath.Join(stateDir, pluginKindsFile), b, 0o644)
	}
	if err != nil {
		logger.Warn("cannot remember which kinds each plugin serves; a refused plugin's kinds will not be named in Hello", "error", err)
	}
}

func readPluginKinds(stateDir string) map[string][]string {
	known := map[string][]string{}
	b, err := os.ReadFile(filepath.Join(stateDir, pluginKindsFile))
	if err != nil {
		return known
	}
	if json.Unmarshal(b, &known) != nil || known == nil {
		return map[string][]string{}
	}
	return known
}

// pluginRefusals are the host's refusals for Hello, each with the kinds
// the file served when bcd last ran it.
func pluginRefusals(stateDir string, host *pluginhost.Host) []*agentv1.PluginRefusal {
	refused := host.Refused()
	if len(refused) == 0 {
		return nil
	}
	known := readPluginKinds(stateDir)
	out := make([]*agentv1.PluginRefusal, 0, len(refused))
	for _, r := range refused {
		if r.Plugin == "" {
			continue
		}
		msg := ""
		if r.Err != nil {
			msg = r.Err.Error()
		}
		kinds := append([]string(nil), known[r.Plugin]...)
		sort.Strings(kinds)
		out = append(out, &agentv1.PluginRefusal{
			Plugin: r.Plugin, Reason: r.Reason, Message: msg,
			PinnedSha256: r.PinnedSHA256, FoundSha256: r.FoundSHA256, Kinds: kinds,
		})
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
