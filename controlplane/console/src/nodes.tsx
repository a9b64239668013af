// The node list: one page of nodes.list at a time, filtered and paged on
// the server (pool, selector, condition, connected, health, text, failed
// check), with the filters and the cursor in the URL's hash so that a link
// opens the same list. A node's row is read again when one of its events
// arrives.
import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { Node } from "../../../sdk/typescript/src/web.js";
import { Ago, Conditions, ErrorLine, HealthBadge, LiveBadge, Muted, SessionBadge, api, href, rowKeys, tenant, useFollow } from "./core.js";

/** The filters nodes.list takes, as the hash's query names them. */
const filterKeys = ["query", "pool", "selector", "condition", "connected", "health", "failedCheck"] as const;
type Filters = Partial<Record<(typeof filterKeys)[number], string>>;

/** The page size. */
const pageSize = 50;

// The cursors of the pages before this one, per filter set: Previous goes
// back through them (a link straight to a later page starts a new trail).
const trails = new Map<string, string[]>();

function filtersOf(q: URLSearchParams): Filters {
  const f: Filters = {};
  for (const k of filterKeys) {
    const v = q.get(k);
    if (v) {
      f[k] = v;
    }
  }
  return f;
}

function NodeRow({ n }: { n: Node }): JSX.Element {
  const open = `#/nodes/${n.id}`;
  return (
    <tr data-node={n.id} data-connected={String(n.connected)} {...rowKeys(open)}>
      <td><a href={open} tabIndex={-1}>{n.id}</a></td>
      <td><a href={href("nodes", { pool: n.pool })} tabIndex={-1}>{n.pool}</a></td>
      <td><HealthBadge n={n} /></td>
      <td class="session-cell"><SessionBadge n={n} /></td>
      <td>{n.agentVersion || <Muted>—</Muted>}</td>
      <td class="last-seen"><Ago t={n.lastSeen} /></td>
      <td><Conditions n={n} /></td>
      <td class="labels">{Object.entries(n.labels).map(([k, v]) => <code key={k}>{v ? `${k}=${v}` : k}</code>)}</td>
      <td>{n.trustVersion > 0n ? `v${n.trustVersion}` : "none"}</td>
    </tr>
  );
}

function FilterForm({ filters }: { filters: Filters }): JSX.Element {
  const submit = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget as HTMLFormElement);
    const q: Record<string, string> = {};
    for (const k of filterKeys) {
      q[k] = String(form.get(k) ?? "").trim();
    }
    location.hash = href("nodes", q);
  };
  const text = (name: keyof Filters, label: string, placeholder: string) => (
    <label>{label} <input name={name} id={`filter-${name}`} value={filters[name] ?? ""} placeholder={placeholder} /></label>
  );
  return (
    <form id="node-filters" class="filters" onSubmit={submit}>
      {text("query", "Search", "id, pool or label value")}
      {text("pool", "Pool", "default")}
      {text("selector", "Labels", "gpu=h200,rack in (r1,r2)")}
      {text("condition", "Condition", "RebootRequired")}
      {text("failedCheck", "Failed check", "row-remap.pending")}
      <label>Session{" "}
        <select name="connected" id="filter-connected" value={filters.connected ?? ""}>
          <option value="">any</option><option value="true">connected</option><option value="false">not connected</option>
        </select>
      </label>
      <label>Health{" "}
        <select name="health" id="filter-health" value={filters.health ?? ""}>
          <option value="">any</option><option value="healthy">healthy</option><option value="unhealthy">unhealthy</option>
        </select>
      </label>
      <button type="submit">Filter</button>
      <a href="#/nodes">clear</a>
    </form>
  );
}

export function NodesPage({ query }: { query: URLSearchParams }): JSX.Element {
  const filters = filtersOf(query);
  const cursor = query.get("cursor") ?? "";
  const key = JSON.stringify(filters);
  const [nodes, setNodes] = useState<Node[]>();
  const [next, setNext] = useState("");
  const [err, setErr] = useState<unknown>();
  const load = () => {
    const connected = filters.connected === undefined ? undefined : filters.connected === "true";
    api().nodes.list({ tenantId: tenant(), ...filters, connected, cursor, limit: pageSize }).then((page) => {
      setNodes(page.items);
      setNext(page.nextCursor);
      setErr(undefined);
    }, setErr);
  };
  const live = useFollow({ tenantId: tenant() }, (e) => {
    if (e.nodeId && nodes?.some((n) => n.id === e.nodeId)) {
      api().nodes.get({ tenantId: tenant(), nodeId: e.nodeId }).then((n) => setNodes((old) => old?.map((o) => (o.id === n.id ? n : o))), setErr);
    }
  }, load, [key, cursor]);
  const trail = trails.get(key) ?? [];
  const page = (c: string, back: boolean) => {
    trails.set(key, back ? trail.slice(0, -1) : [...trail, cursor]);
    location.hash = href("nodes", { ...filters, cursor: c });
  };
  const filtered = Object.keys(filters).length > 0;
  return (
    <section>
      <h1>Nodes <LiveBadge live={live} /></h1>
      <p class="muted">The tenant's nodes you may read (nodes.list), {pageSize} a page, filtered on the server; a node's row is read again whenever one of its events arrives.</p>
      <FilterForm filters={filters} key={key} />
      <ErrorLine err={err} />
      <table id="nodes">
        <thead><tr>{["Node", "Pool", "Health", "Session", "Version", "Last seen", "Conditions", "Labels", "Trust bundle"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
        <tbody>
          {nodes === undefined ? <tr><td colSpan={9} class="muted">loading…</td></tr>
            : nodes.length === 0 ? <tr class="empty"><td colSpan={9} class="muted">{filtered ? "no node you may read matches these filters" : "no nodes you may read in this tenant"}</td></tr>
            : nodes.map((n) => <NodeRow n={n} key={n.id} />)}
        </tbody>
      </table>
      <div class="pager">
        <button type="button" id="prev-page" disabled={cursor === ""} onClick={() => page(trail[trail.length - 1] ?? "", true)}>← Previous</button>
        <button type="button" id="next-page" disabled={next === ""} onClick={() => page(next, false)}>Next →</button>
      </div>
    </section>
  );
}
