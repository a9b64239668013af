// What a node can run, beside the registry, and what holds a command back:
// the kinds the node's last Hello reported with how the registry sees each
// (a mismatch holds that kind's commands), the plugin files its bcd
// refused (a stale pin names both SHA-256s), and a command's blockedBy,
// which says what only a person can fix and how, while the command waits
// and after it ended (it is kept on a command that expired waiting).
import type { JSX } from "preact";

import type { Command, Node } from "../../../sdk/typescript/src/web.js";
import { Muted, terminal } from "./core.js";
import { Digest, kindHref } from "./kinds.js";

/** Problems first (mismatch, then unregistered), then by name. */
const statusOrder: Record<string, number> = { mismatch: 0, unregistered: 1, compatible: 2, registered: 3 };

/** A node's kind status as a badge: registered, compatible, mismatch (red), unregistered. */
export function KindStatus({ s }: { s: string }): JSX.Element {
  return <span class={`state kind-status kind-status-${s}`} data-status={s}>{s}</span>;
}

function registryText(status: string, version: string): JSX.Element | string {
  if (!version) {
    return <Muted>—</Muted>;
  }
  switch (status) {
    case "compatible":
      return `dispatched under ${version} (within its compatible versions)`;
    case "mismatch":
      return `the registry's newest is ${version}`;
    default:
      return version;
  }
}

/** The kinds the node's last Hello reported, with how the registry sees each. */
export function NodeKinds({ n }: { n: Node }): JSX.Element {
  if (n.kinds.length === 0) {
    return (
      <p class="muted" id="node-kinds-none">
        {n.connectedSince ? "Its last Hello listed no kinds (a node that lists none is sent every kind)." : "No Hello from its bcd yet: it never connected."}
      </p>
    );
  }
  const kinds = [...n.kinds].sort((a, b) => (statusOrder[a.status] ?? 9) - (statusOrder[b.status] ?? 9) || a.kind.localeCompare(b.kind));
  const mismatched = kinds.filter((k) => k.status === "mismatch");
  return (
    <div>
      {mismatched.length > 0 ? (
        <p class="warning" id="kind-mismatch-note" role="alert">
          This node runs another manifest of {mismatched.map((k) => <b key={k.kind}>{k.kind} </b>)}than the registry: its commands of{" "}
          {mismatched.length === 1 ? "that kind" : "those kinds"} wait, and each says what to do (register the node's manifest, declare compatible
          versions, or install the registered version on the node).
        </p>
      ) : null}
      <table id="node-kinds">
        <thead><tr>{["Kind", "Version on the node", "Digest on the node", "Status", "Registry"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
        <tbody>
          {kinds.map((k) => (
            <tr key={k.kind} data-kind={k.kind} data-status={k.status} class={k.status === "mismatch" ? "row-mismatch" : ""}>
              <td><a href={kindHref(k.kind, k.status === "mismatch" ? "" : k.registryVersion)}>{k.kind}</a></td>
              <td>{k.version || <Muted>—</Muted>}</td>
              <td><Digest d={k.digest} /></td>
              <td><KindStatus s={k.status} /></td>
              <td>{registryText(k.status, k.registryVersion)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** The plugin files the node's bcd refused; nothing when it refused none. */
export function RefusedPlugins({ n }: { n: Node }): JSX.Element | null {
  if (n.refusedPlugins.length === 0) {
    return null;
  }
  return (
    <div class="warning" id="refused-plugins" role="alert">
      <b>Its bcd refused {n.refusedPlugins.length === 1 ? "a plugin file" : `${n.refusedPlugins.length} plugin files`}</b>: the kinds
      {n.refusedPlugins.length === 1 ? " it" : " they"} served are not loaded, and their commands wait.
      <table>
        <thead><tr>{["Plugin", "Reason", "Message", "Pinned SHA-256", "Found SHA-256", "Kinds it served"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
        <tbody>
          {n.refusedPlugins.map((r) => (
            <tr key={r.plugin} data-plugin={r.plugin} data-reason={r.reason}>
              <td><code>{r.plugin}</code></td>
              <td>{r.reason}</td>
              <td>{r.message}</td>
              <td><Digest d={r.pinnedSha256} /></td>
              <td><Digest d={r.foundSha256} /></td>
              <td>{r.kinds.length ? r.kinds.map((k) => <a href={kindHref(k)} key={k}>{k} </a>) : <Muted>unknown</Muted>}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/**
 * BlockedBy shows what holds a command back until a person acts: in red
 * while it is pending, and as "was blocked by" once it ended.
 */
export function BlockedBy({ c }: { c: Command }): JSX.Element | null {
  const b = c.blockedBy;
  if (!b?.reason) {
    return null;
  }
  const active = !terminal.has(c.state);
  const row = (label: string, v: JSX.Element | string) => <tr><th>{label}</th><td>{v}</td></tr>;
  const both = (version: string, digest: string) => <span>{version || "unknown version"}, digest <Digest d={digest} /></span>;
  return (
    <div id="blocked-by" class={active ? "blocked" : "blocked blocked-past"} data-reason={b.reason} data-active={String(active)} role={active ? "alert" : undefined}>
      <h2>{active ? "Blocked" : "Was blocked"} by <code>{b.reason}</code></h2>
      {active ? <p>This command waits, and goes out once the node or the registry makes it runnable; it expires at its deadline otherwise.</p>
        : <p>It ended {c.state} while it waited on this.</p>}
      <p class="blocked-message">{b.message}</p>
      {b.fix ? <p class="blocked-fix"><b>What to do:</b> {b.fix}</p> : null}
      <table class="fields">
        <tbody>
          {b.kind ? row("Kind", <a href={kindHref(b.kind)}>{b.kind}</a>) : null}
          {b.nodeDigest || b.nodeVersion ? row("On the node", both(b.nodeVersion, b.nodeDigest)) : null}
          {b.registryDigest || b.registryVersion ? row("In the registry", <span>
            {b.registryVersion ? <a href={kindHref(b.kind, b.registryVersion)}>{b.registryVersion}</a> : "unknown version"}, digest <Digest d={b.registryDigest} />
          </span>) : null}
          {b.plugin ? row("Plugin", <code>{b.plugin}</code>) : null}
          {b.pinnedSha256 ? row("Pinned SHA-256", <Digest d={b.pinnedSha256} />) : null}
          {b.foundSha256 ? row("Found SHA-256", <Digest d={b.foundSha256} />) : null}
        </tbody>
      </table>
    </div>
  );
}
