// The web console: the fleet's commands in a browser, on the TypeScript
// client (@better-compute/client's web entry, connect-web). It holds a
// bearer token in the tab's sessionStorage and never an approver key: a
// batch awaiting approval shows the `better-compute batch approve` line to
// run where the key is. Live views follow events.watch; nothing polls.
import { ApiError, createClient, jsonOf } from "../../../sdk/typescript/src/web.js";
import type { Batch, BetterComputeClient, Command, Event, EventWatch, Node } from "../../../sdk/typescript/src/web.js";

type Timestamp = { seconds: bigint; nanos: number } | undefined;

const terminal = new Set(["succeeded", "failed", "rejected", "expired", "cancelled"]);

interface Session {
  token: string;
  tenantId: string;
}

let session: Session | undefined = loadSession();
let client: BetterComputeClient | undefined = session && createClient({ baseUrl: location.origin, token: session.token });
// The watch of the page on view; a new page stops it.
let pageAbort = new AbortController();

function loadSession(): Session | undefined {
  const s = sessionStorage.getItem("bc-console");
  return s ? (JSON.parse(s) as Session) : undefined;
}

// h builds an element: h("td", { class: "x" }, "text", child).
function h(tag: string, attrs: Record<string, string> = {}, ...children: (Node_ | string | undefined | false)[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== undefined && c !== false) {
      el.append(c);
    }
  }
  return el;
}
type Node_ = globalThis.Node;

function toDate(t: Timestamp): Date | undefined {
  return t ? new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)) : undefined;
}

/** "3 min ago", "in 5 min": relative, with the exact time on hover. */
function ago(t: Timestamp): HTMLElement {
  const d = toDate(t);
  if (!d) {
    return h("span", { class: "muted" }, "—");
  }
  const s = Math.round((d.getTime() - Date.now()) / 1000);
  const abs = Math.abs(s);
  const [n, unit] = abs < 60 ? [abs, "s"] : abs < 3600 ? [Math.round(abs / 60), "min"] : abs < 86400 ? [Math.round(abs / 3600), "h"] : [Math.round(abs / 86400), "d"];
  const text = abs < 5 ? "just now" : s < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, text);
}

function state(s: string): HTMLElement {
  return h("span", { class: `state state-${s}`, "data-state": s }, s);
}

function errorText(err: unknown): string {
  if (err instanceof ApiError) {
    const d = Object.entries(err.details).map(([k, v]) => `${k}: ${v}`).join(", ");
    return `${err.code}: ${err.message}${d ? ` (${d})` : ""}`;
  }
  return String(err);
}

function show(...content: HTMLElement[]): void {
  const main = document.getElementById("main")!;
  main.replaceChildren(...content);
}

function nav(): HTMLElement {
  return h("nav", {},
    h("a", { href: "#/nodes" }, "Nodes"), " ",
    h("a", { href: "#/batches" }, "Batches"), " ",
    h("span", { class: "muted" }, `tenant ${session!.tenantId}`), " ",
    button("Sign out", () => {
      sessionStorage.removeItem("bc-console");
      session = undefined;
      client = undefined;
      location.hash = "#/";
      route();
    }));
}

function button(label: string, onClick: () => void, cls = ""): HTMLElement {
  const b = h("button", { type: "button", class: cls }, label);
  b.addEventListener("click", onClick);
  return b;
}

// --- sign in ---------------------------------------------------------------

function signIn(message = ""): void {
  const token = h("input", { id: "token", type: "password", autocomplete: "off", placeholder: "bearer token" }) as HTMLInputElement;
  const tenant = h("input", { id: "tenant", placeholder: "tenant_…" }) as HTMLInputElement;
  const err = h("p", { class: "error", id: "signin-error" }, message);
  const form = h("form", { id: "signin" },
    h("h1", {}, "better-compute console"),
    h("p", {}, "Sign in with an API bearer token (bc-server's auth). It stays in this tab only."),
    h("label", {}, "Token ", token), h("label", {}, "Tenant ", tenant),
    h("button", { type: "submit" }, "Sign in"), err);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const s = { token: token.value.trim(), tenantId: tenant.value.trim() };
    const c = createClient({ baseUrl: location.origin, token: s.token });
    try {
      // Any call proves the token; batches need compute:batches:read,
      // which a reader may lack: only UNAUTHENTICATED is a wrong token.
      await c.commandBatches.list({ tenantId: s.tenantId, limit: 1 });
    } catch (x) {
      if (x instanceof ApiError && (x.code === "UNAUTHENTICATED" || x.code === "NOT_FOUND")) {
        err.textContent = errorText(x);
        return;
      }
    }
    sessionStorage.setItem("bc-console", JSON.stringify(s));
    session = s;
    client = c;
    location.hash = "#/nodes";
  });
  show(form);
}

// --- nodes -----------------------------------------------------------------

function conditions(n: Node): HTMLElement {
  if (n.conditions.length === 0) {
    return h("span", { class: "muted" }, "no conditions");
  }
  return h("ul", { class: "conditions" }, ...n.conditions.map((c) =>
    h("li", { class: `cond cond-${c.status}` }, h("b", {}, c.type), ` ${c.status}`, c.reason ? ` (${c.reason})` : "", c.message ? `: ${c.message}` : "", " ", ago(c.since))));
}

/** The node's session: connected (green, with its gateway and since when) or disconnected (red, since when). */
function sessionBadge(n: Node): HTMLElement {
  if (n.connected) {
    return h("span", {}, h("span", { class: "session session-connected", "data-session": "connected", title: `gateway ${n.gateway || "?"}, session ${n.sessionEpoch}` }, "connected"),
      " since ", ago(n.connectedSince));
  }
  if (!n.connectedSince) {
    return h("span", { class: "session session-never", "data-session": "never" }, "never connected");
  }
  return h("span", {}, h("span", { class: "session session-disconnected", "data-session": "disconnected", title: `last gateway ${n.gateway || "?"}` }, "disconnected"),
    n.disconnectedAt ? h("span", {}, " since ", ago(n.disconnectedAt)) : h("span", { class: "muted" }, " (its gateway stopped reporting)"));
}

function nodeRow(n: Node): HTMLElement {
  return h("tr", { "data-node": n.id, "data-connected": String(n.connected) },
    h("td", {}, h("a", { href: `#/nodes/${n.id}` }, n.id)), h("td", {}, n.pool), h("td", {}, n.role), h("td", { class: "session-cell" }, sessionBadge(n)),
    h("td", {}, n.agentVersion || h("span", { class: "muted" }, "—")), h("td", { class: "last-seen" }, ago(n.lastSeen)), h("td", {}, conditions(n)),
    h("td", {}, n.trustVersion > 0n ? `v${n.trustVersion}` : "none"), h("td", {}, `generation ${n.appliedGeneration}`));
}

async function nodesPage(): Promise<void> {
  const rows = h("tbody", {});
  const err = h("p", { class: "error" });
  const live = h("span", { class: "live" }, "connecting…");
  show(nav(), h("h1", {}, "Nodes ", live),
    h("p", { class: "muted" }, "The tenant's nodes you may read (nodes.list), with their sessions; a node's row is read again whenever one of its events arrives."), err,
    h("table", { id: "nodes" }, h("thead", {}, h("tr", {}, ...["Node", "Pool", "Role", "Session", "Version", "Last seen", "Conditions", "Trust bundle", "Applied spec"].map((x) => h("th", {}, x)))), rows));
  const byId = new Map<string, HTMLElement>();
  const put = (n: Node) => {
    const row = nodeRow(n);
    const old = byId.get(n.id);
    if (old) {
      old.replaceWith(row);
    } else {
      // By id, as nodes.list orders them.
      const after = [...byId.entries()].filter(([id]) => id > n.id).sort(([a], [b]) => (a < b ? -1 : 1))[0]?.[1];
      rows.insertBefore(row, after ?? null);
    }
    byId.set(n.id, row);
  };
  // The watch opens first, so that nothing between the list and the watch is missed.
  const { opened } = follow({ tenantId: session!.tenantId }, (e) => {
    if (!e.nodeId) {
      return;
    }
    client!.nodes.get({ tenantId: session!.tenantId, nodeId: e.nodeId }).then(put, (x: unknown) => (err.textContent = errorText(x)));
  }, live);
  await opened;
  try {
    let cursor = "";
    do {
      const page = await client!.nodes.list({ tenantId: session!.tenantId, cursor, limit: 200 });
      page.items.forEach(put);
      cursor = page.nextCursor;
    } while (cursor);
    if (byId.size === 0) {
      rows.append(h("tr", {}, h("td", { colspan: "9", class: "muted" }, "no nodes you may read in this tenant")));
    }
  } catch (x) {
    err.textContent = errorText(x);
  }
}

// follow runs a watch for the page on view and calls on for each event.
// opened resolves once the watch is open (the server named the cursor it
// starts after), or after 5 s without it: a page reads its state after
// that, so that no change between the read and the watch is missed.
function follow(req: Parameters<BetterComputeClient["events"]["watch"]>[0], on: (e: Event) => void, live?: HTMLElement): { watch: EventWatch; opened: Promise<void> } {
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
    setTimeout(resolve, 5000);
  });
  const w = client!.events.watch(req, {
    signal: pageAbort.signal,
    onOpen: () => {
      if (live) {
        live.textContent = "live";
      }
      open();
    },
    onReconnect: (err) => live && (live.textContent = `reconnecting (${err.code})…`),
  });
  void (async () => {
    try {
      for await (const e of w) {
        if (live) {
          live.textContent = "live";
        }
        on(e);
      }
    } catch (err) {
      if (live) {
        live.textContent = `not live: ${errorText(err)}`;
      }
      open();
    }
  })();
  return { watch: w, opened };
}

// --- a node's commands -----------------------------------------------------

const cancelWarning =
  "A pending command is cancelled at once and never runs. A command already sent to the node (dispatched, acked or running) " +
  "is only asked to stop: the node stops between actions and reports what really happened, so anything it already did " +
  "(a reboot begun, a GPU reset, logs uploaded) is NOT undone. A command that has ended cannot be cancelled.";

function confirmCancel(c: Command): Promise<boolean> {
  return new Promise((resolve) => {
    const dlg = h("dialog", { id: "cancel-dialog" },
      h("h2", {}, `Cancel ${c.kind} ${c.id}?`),
      h("p", {}, `It is ${c.state} now. `, cancelWarning),
      button("Cancel the command", () => done(true), "danger"), " ", button("Keep it", () => done(false))) as HTMLDialogElement;
    const done = (v: boolean) => {
      dlg.close();
      dlg.remove();
      resolve(v);
    };
    document.body.append(dlg);
    dlg.showModal();
  });
}

function progressText(c: Command): string {
  const p = jsonOf(c.progress) as Record<string, unknown> | undefined;
  if (!p || typeof p !== "object" || terminal.has(c.state)) {
    return "";
  }
  const pct = typeof p.percent === "number" ? `${p.percent}%` : "";
  return [pct, typeof p.message === "string" ? p.message : ""].filter(Boolean).join(" ");
}

function commandRow(c: Command, nodeId: string, refresh: () => void): HTMLElement {
  const cancel = !terminal.has(c.state)
    ? button("Cancel…", async () => {
        if (await confirmCancel(c)) {
          try {
            await client!.commands.cancel({ tenantId: session!.tenantId, nodeId, commandId: c.id });
          } catch (err) {
            alert(errorText(err));
          }
          refresh();
        }
      })
    : "";
  return h("tr", { "data-command": c.id, "data-state": c.state },
    h("td", {}, String(c.seq)), h("td", {}, h("a", { href: `#/nodes/${nodeId}/commands/${c.id}` }, c.kind)), h("td", {}, state(c.state)),
    h("td", {}, c.reason || c.waitingReason || ""), h("td", { class: "message" }, c.message || c.waitingMessage || (c.awaitingApproval ? `awaiting approval of ${c.batchId}` : "")),
    h("td", { class: "progress" }, progressText(c)), h("td", { class: "requester" }, requesterText(c)), h("td", {}, ago(c.createdAt)), h("td", {}, cancel));
}

// requesterText says who asked for a command and how: "ops (api)",
// "ops (fleet run run_…)", "provision (module:provision)"; the server
// records it, never the caller.
function requesterText(c: { requester: string; requestedVia: string; runId: string }): string {
  if (!c.requester) return "—";
  if (c.requestedVia === "fleet-run" && c.runId) return `${c.requester} (fleet run ${c.runId})`;
  return c.requestedVia ? `${c.requester} (${c.requestedVia})` : c.requester;
}

async function nodePage(nodeId: string): Promise<void> {
  const live = h("span", { class: "live", id: "live" }, "connecting…");
  const head = h("div", {});
  const rows = h("tbody", {});
  const err = h("p", { class: "error" });
  const runDiag = button("Run diag.nvml", async () => {
    try {
      const c = await client!.commands.run({ tenantId: session!.tenantId, nodeId, kind: "diag.nvml", idempotencyKey: `console-${crypto.randomUUID()}` });
      // Its page shows the checks as they arrive.
      location.hash = `#/nodes/${nodeId}/commands/${c.id}`;
    } catch (x) {
      err.textContent = errorText(x);
    }
  });
  runDiag.id = "run-diag";
  show(nav(), h("h1", {}, `Node ${nodeId} `, live), head, h("h2", {}, "Commands (newest first) "), runDiag, err,
    h("table", { id: "commands" }, h("thead", {}, h("tr", {}, ...["Seq", "Kind", "State", "Reason", "Message", "Progress", "Requested by", "Queued", ""].map((x) => h("th", {}, x)))), rows));
  try {
    const n = await client!.nodes.get({ tenantId: session!.tenantId, nodeId });
    head.replaceChildren(h("p", {}, sessionBadge(n), `, last seen `, ago(n.lastSeen), `; pool ${n.pool}, role ${n.role}, agent ${n.agentVersion || "unknown"}, trust bundle ${n.trustVersion > 0n ? `v${n.trustVersion}` : "none"}, registered `, ago(n.createdAt)), conditions(n));
  } catch (x) {
    head.replaceChildren(h("p", { class: "error" }, errorText(x)));
  }
  const byId = new Map<string, HTMLElement>();
  const version = new Map<string, number>();
  const put = (c: Command) => {
    // A read that raced a later one must not put an older state back.
    const at = toDate(c.updatedAt)?.getTime() ?? 0;
    if ((version.get(c.id) ?? -1) > at) {
      return;
    }
    version.set(c.id, at);
    const row = commandRow(c, nodeId, () => void update(c.id));
    const old = byId.get(c.id);
    if (old) {
      old.replaceWith(row);
    } else {
      // Newest first: a new command goes above the others (higher seq).
      const after = [...rows.children].find((r) => Number(r.firstChild?.textContent) < c.seq);
      rows.insertBefore(row, after ?? null);
    }
    byId.set(c.id, row);
  };
  const update = async (commandId: string) => {
    try {
      put(await client!.commands.get({ tenantId: session!.tenantId, nodeId, commandId }));
    } catch (x) {
      err.textContent = errorText(x);
    }
  };
  // Every event of the node (queued, progress, cancel requested, settled)
  // names its command: fetch that one again. The watch starts before the
  // list, so that nothing between the two is missed.
  await follow({ tenantId: session!.tenantId, nodeId, cursor: "now" }, (e) => {
    const id = e.data?.commandId;
    if (typeof id === "string") {
      void update(id);
    }
  }, live).opened;
  try {
    const { items } = await client!.commands.list({ tenantId: session!.tenantId, nodeId, limit: 50 });
    items.forEach(put);
  } catch (x) {
    err.textContent = errorText(x);
  }
}

// --- one command -----------------------------------------------------------

interface Check {
  check: string;
  gpu?: { index: number; uuid?: string; busId: string };
  status: string;
  reason: string;
  action?: string;
}

function checkTable(result: unknown): HTMLElement | undefined {
  const checks = (result as { checks?: Check[] } | undefined)?.checks;
  if (!Array.isArray(checks)) {
    return undefined;
  }
  return h("table", { id: "checks" },
    h("thead", {}, h("tr", {}, ...["Check", "GPU", "Status", "Why", "What to do"].map((x) => h("th", {}, x)))),
    // Failing checks first (in the order they ran), then the rest.
    h("tbody", {}, ...[...checks].sort((a, b) => Number(b.status === "fail") - Number(a.status === "fail")).map((c) => h("tr", { "data-check": c.check, "data-status": c.status },
      h("td", {}, c.check), h("td", {}, c.gpu ? `${c.gpu.index} (${c.gpu.busId})` : "all"), h("td", {}, state(c.status)),
      h("td", {}, c.reason), h("td", {}, c.action ?? "")))));
}

function hex(b: Uint8Array): string {
  return [...b.slice(0, 8)].map((x) => x.toString(16).padStart(2, "0")).join("");
}

async function commandPage(nodeId: string, commandId: string): Promise<void> {
  const live = h("span", { class: "live", id: "live" }, "connecting…");
  const body = h("div", {});
  show(nav(), h("h1", {}, h("a", { href: `#/nodes/${nodeId}` }, nodeId), ` / ${commandId} `, live), body);
  const render = async () => {
    let c: Command;
    try {
      c = await client!.commands.get({ tenantId: session!.tenantId, nodeId, commandId });
    } catch (x) {
      body.replaceChildren(h("p", { class: "error" }, errorText(x)));
      return;
    }
    const row = (k: string, ...v: (HTMLElement | string)[]) => h("tr", {}, h("th", {}, k), h("td", {}, ...v));
    const signature = c.signed ? `signed at enqueue (command digest ${c.commandSha256.slice(0, 16)}…)` : "not signed (the server has no pki.commandSigning)";
    const attestation = c.nodeSig.length > 0
      ? `attested: the node signed its result (signature ${hex(c.nodeSig)}…, result digest ${c.resultSha256.slice(0, 16)}…); check it with: better-compute commands verify ${c.id} nodeId=${nodeId}`
      : terminal.has(c.state) ? "no node signature on this result" : "no result yet";
    body.replaceChildren(
      h("table", { class: "fields", id: "command" },
        row("Kind", c.kind, c.kindVersion ? ` v${c.kindVersion}` : ""), row("State", state(c.state)), row("Reason", c.reason || "—"),
        row("Message", c.message || c.waitingMessage || "—"), row("Progress", progressText(c) || "—"),
        row("Requested by", h("span", { id: "requester" }, requesterText(c))),
        row("Queued", ago(c.createdAt)), row("Expires (not after)", ago(c.notAfter)), row("Settled", ago(c.settledAt)),
        row("Batch", c.batchId ? h("a", { href: "#/batches" }, c.batchId) : "—", c.awaitingApproval ? " (awaiting approval)" : ""),
        row("Signature", h("span", { id: "signature" }, signature)), row("Attestation", h("span", { id: "attestation" }, attestation))),
      ...(c.kind === "diag.nvml" && c.result ? [h("h2", {}, "Checks"), checkTable(jsonOf(c.result)) ?? h("p", {}, "no checks in the result")] : []),
      h("h2", {}, "Payload"), h("pre", {}, JSON.stringify(c.payload ?? {}, null, 2)),
      h("h2", {}, "Result"), h("pre", { id: "result" }, c.result === undefined ? "—" : JSON.stringify(jsonOf(c.result), null, 2)));
  };
  // The watch starts before the first read, so that a settle between the
  // two is not missed.
  await follow({ tenantId: session!.tenantId, nodeId, cursor: "now" }, (e) => {
    if (e.data?.commandId === commandId) {
      void render();
    }
  }, live).opened;
  await render();
}

// --- batches ---------------------------------------------------------------

function batchCard(b: Batch): HTMLElement {
  const approve = b.state === "awaiting-approval"
    ? h("div", { class: "approve" },
        h("p", {}, `${b.approvalsNeeded} more approval(s) needed (threshold ${b.threshold}). An approver runs, where their key is (the console never holds one):`),
        h("pre", { class: "approve-line" }, `better-compute batch approve --tenant ${b.tenantId} --batch ${b.batchId} --key approver.pem`))
    : "";
  return h("section", { class: "batch", "data-batch": b.batchId, "data-state": b.state },
    h("h2", {}, `${b.batchId} `, state(b.state)),
    h("p", {}, b.reason), h("p", { class: "muted" }, `requested by ${b.requester} `, ago(b.createdAt), ", deadline ", ago(b.deadline)),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Subject"), h("th", {}, "Kind"), h("th", {}, "Payload"))),
      h("tbody", {}, ...b.scope.map((l) => h("tr", {}, h("td", {}, l.subject), h("td", {}, l.kind), h("td", {}, l.payloadSha256 ? `sha256 ${l.payloadSha256.slice(0, 12)}…` : "any"))))),
    h("p", {}, "Approvals: ", b.approvals.length === 0 ? "none yet" : ""),
    h("ul", {}, ...b.approvals.map((a) => h("li", {}, `${a.approver} (key ${a.keyId.slice(0, 12)}…) `, ago(a.approvedAt)))),
    approve);
}

async function batchesPage(): Promise<void> {
  const list = h("div", { id: "batches" });
  show(nav(), h("h1", {}, "Batches"), list);
  try {
    const { items } = await client!.commandBatches.list({ tenantId: session!.tenantId, limit: 50 });
    list.replaceChildren(...(items.length ? items.map(batchCard) : [h("p", { class: "muted" }, "no batches")]));
  } catch (x) {
    list.replaceChildren(h("p", { class: "error" }, errorText(x)));
  }
}

// --- routing ---------------------------------------------------------------

function route(): void {
  pageAbort.abort();
  pageAbort = new AbortController();
  document.querySelector("#cancel-dialog")?.remove();
  if (!session || !client) {
    signIn();
    return;
  }
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (parts[0] === "nodes" && parts[1] && parts[2] === "commands" && parts[3]) {
    void commandPage(parts[1], parts[3]);
  } else if (parts[0] === "nodes" && parts[1]) {
    void nodePage(parts[1]);
  } else if (parts[0] === "batches") {
    void batchesPage();
  } else {
    void nodesPage();
  }
}

window.addEventListener("hashchange", route);
route();
