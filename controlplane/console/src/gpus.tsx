// A node's GPUs, from the inventory its bcd reported (Node.inventory: the
// document inventory.refresh collects, plugins/internal/gpu.Inventory):
// model, bus id, ECC, row remapping, PCIe link, this boot's XIDs and MIG.
// A field no source reported shows as "—", with why when a source said so.
import type { JSX } from "preact";

import { Muted } from "./core.js";

interface XID {
  xid: number;
  busId?: string;
  action?: string;
  ignored?: boolean;
  count?: number;
  message?: string;
}

interface GPU {
  index: number;
  uuid?: string;
  busId?: string;
  name?: string;
  mig?: { enabled: boolean; pendingEnabled?: boolean; instances?: { uuid: string }[] };
  ecc?: { enabled?: boolean; pendingEnabled?: boolean; uncorrectableVolatile?: number; uncorrectableAggregate?: number };
  remappedRows?: { correctable: number; uncorrectable: number; pending: boolean; failure: boolean };
  pcie?: { widthCurrent?: number; widthMax?: number; genCurrent?: number; genMax?: number; speedCurrent?: string };
  xids?: XID[];
  skipped?: Record<string, string>;
}

interface Inventory {
  collectedAt?: string;
  driverVersion?: string;
  gpus?: GPU[];
  unmatchedXids?: XID[];
}

/** The inventory document, wherever in Node.inventory the node put it. */
function inventoryOf(inv: unknown): Inventory | undefined {
  if (!inv || typeof inv !== "object") {
    return undefined;
  }
  const o = inv as Record<string, unknown>;
  if (Array.isArray(o.gpus)) {
    return o as Inventory;
  }
  for (const v of Object.values(o)) {
    if (v && typeof v === "object" && Array.isArray((v as Record<string, unknown>).gpus)) {
      return v as Inventory;
    }
  }
  return undefined;
}

function skipped(g: GPU, field: string): JSX.Element {
  const why = g.skipped?.[field];
  return why ? <span class="muted" title={why}>skipped</span> : <Muted>—</Muted>;
}

function ecc(g: GPU): JSX.Element {
  if (!g.ecc) {
    return skipped(g, "ecc.mode");
  }
  const mode = g.ecc.enabled === undefined ? "?" : g.ecc.enabled ? "on" : "off";
  const pending = g.ecc.pendingEnabled !== undefined && g.ecc.pendingEnabled !== g.ecc.enabled ? ` (→ ${g.ecc.pendingEnabled ? "on" : "off"} after reboot)` : "";
  const bad = (g.ecc.uncorrectableVolatile ?? 0) > 0;
  return (
    <span class={bad ? "bad" : ""} data-bad={String(bad)}>
      {mode}{pending}; uncorrectable {g.ecc.uncorrectableVolatile ?? "?"} this load, {g.ecc.uncorrectableAggregate ?? "?"} lifetime
    </span>
  );
}

function rows(g: GPU): JSX.Element {
  const r = g.remappedRows;
  if (!r) {
    return skipped(g, "remappedRows");
  }
  const bad = r.pending || r.failure;
  return (
    <span class={bad ? "bad" : ""} data-bad={String(bad)}>
      {r.pending ? "remap pending (reset the GPU)" : r.failure ? "remap FAILED" : "ok"}; {r.correctable} correctable, {r.uncorrectable} uncorrectable
    </span>
  );
}

function pcie(g: GPU): JSX.Element {
  const p = g.pcie;
  if (!p) {
    return skipped(g, "pcie.link");
  }
  const narrow = p.widthCurrent !== undefined && p.widthMax !== undefined && p.widthCurrent < p.widthMax;
  return (
    <span class={narrow ? "bad" : ""} data-bad={String(narrow)}>
      x{p.widthCurrent ?? "?"} of x{p.widthMax ?? "?"}{p.genCurrent ? `, gen ${p.genCurrent}/${p.genMax ?? "?"}` : ""}{p.speedCurrent ? ` (${p.speedCurrent})` : ""}
    </span>
  );
}

function xids(list: XID[] | undefined): JSX.Element {
  const shown = (list ?? []).filter((x) => !x.ignored);
  if (shown.length === 0) {
    return <Muted>none</Muted>;
  }
  return (
    <ul class="xids">
      {shown.map((x, i) => <li key={i} title={x.message}>XID {x.xid} ×{x.count ?? 1}{x.action ? ` → ${x.action}` : ""}</li>)}
    </ul>
  );
}

function mig(g: GPU): JSX.Element {
  if (!g.mig) {
    return skipped(g, "mig");
  }
  const pending = g.mig.pendingEnabled !== undefined && g.mig.pendingEnabled !== g.mig.enabled ? ` (→ ${g.mig.pendingEnabled ? "on" : "off"} after reset)` : "";
  return <span>{g.mig.enabled ? `on, ${g.mig.instances?.length ?? 0} instance(s)` : "off"}{pending}</span>;
}

/** The node's GPUs as a table, or why there is none. */
export function GPUTable({ inventory }: { inventory: unknown }): JSX.Element {
  const inv = inventoryOf(inventory);
  if (!inv) {
    return <p class="muted" id="gpus-none">No GPU inventory yet: the node has not reported one (run inventory.refresh).</p>;
  }
  const gpus = inv.gpus ?? [];
  return (
    <div>
      <p class="muted">Driver {inv.driverVersion || "unknown"}; collected {inv.collectedAt ?? "—"}.</p>
      {gpus.length === 0 ? <p class="muted" id="gpus-none">The inventory lists no GPU.</p> : (
        <table id="gpus">
          <thead><tr>{["GPU", "Model", "Bus id", "ECC", "Row remapping", "PCIe link", "XIDs this boot", "MIG"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
          <tbody>
            {gpus.map((g) => (
              <tr key={g.busId ?? g.index} data-gpu={String(g.index)} data-bus={g.busId}>
                <td title={g.uuid}>{g.index}</td><td>{g.name || <Muted>—</Muted>}</td><td><code>{g.busId}</code></td>
                <td class="ecc">{ecc(g)}</td><td class="rows">{rows(g)}</td><td class="pcie">{pcie(g)}</td>
                <td class="xid">{xids(g.xids)}</td><td class="mig">{mig(g)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {inv.unmatchedXids?.length ? <p class="bad">XIDs naming no listed GPU: {xids(inv.unmatchedXids)}</p> : null}
    </div>
  );
}
