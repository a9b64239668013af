// What every page of the console shares: the signed-in session (a bearer
// token in the tab's sessionStorage, never an approver key), the client,
// the hash route, the live watch and the small components (relative times,
// states, sessions, health).
import type { ComponentChildren, JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

import { ApiError, createClient } from "../../../sdk/typescript/src/web.js";
import type { BetterComputeClient, Event, Node } from "../../../sdk/typescript/src/web.js";

export type Timestamp = { seconds: bigint; nanos: number } | undefined;

/** The commands' terminal states. */
export const terminal = new Set(["succeeded", "failed", "rejected", "expired", "cancelled"]);

/** A signed-in tab: its bearer token and tenant. */
export interface Session {
  token: string;
  tenantId: string;
}

const storageKey = "bc-console";

function loadSession(): Session | undefined {
  const s = sessionStorage.getItem(storageKey);
  return s ? (JSON.parse(s) as Session) : undefined;
}

let session = loadSession();
let client = session && createClient({ baseUrl: location.origin, token: session.token });

/** The tab's session, or undefined before sign-in. */
export function currentSession(): Session | undefined {
  return session;
}

/** The client on the tab's token; only called by pages shown after sign-in. */
export function api(): BetterComputeClient {
  return client!;
}

/** The signed-in tenant. */
export function tenant(): string {
  return session!.tenantId;
}

/** Keeps the session in the tab (sessionStorage) and uses its client. */
export function saveSession(s: Session, c: BetterComputeClient): void {
  sessionStorage.setItem(storageKey, JSON.stringify(s));
  session = s;
  client = c;
}

export function clearSession(): void {
  sessionStorage.removeItem(storageKey);
  session = undefined;
  client = undefined;
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError) {
    const d = Object.entries(err.details).map(([k, v]) => `${k}: ${v}`).join(", ");
    return `${err.code}: ${err.message}${d ? ` (${d})` : ""}`;
  }
  return String(err);
}

export function toDate(t: Timestamp): Date | undefined {
  return t ? new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)) : undefined;
}

// --- the route ---------------------------------------------------------------

/** The hash route: "#/nodes?pool=a" is parts ["nodes"] and query pool=a. */
export interface Route {
  parts: string[];
  query: URLSearchParams;
}

export function parseHash(hash: string): Route {
  const [path, q = ""] = hash.replace(/^#\/?/, "").split("?", 2);
  return { parts: path!.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q) };
}

/** A hash link with a query, leaving out empty values. */
export function href(path: string, query: Record<string, string | undefined> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== "") {
      q.set(k, v);
    }
  }
  const s = q.toString();
  return `#/${path}${s ? `?${s}` : ""}`;
}

// --- the live watch ----------------------------------------------------------

/** What events.watch takes: tenantId, cursor, nodeId, types. */
export type WatchRequest = Parameters<BetterComputeClient["events"]["watch"]>[0];

/** What the live badge says: connecting, live, reconnecting or not live. */
export type Live = { state: "connecting" | "live" | "reconnecting" | "failed"; text: string };

/**
 * useFollow runs a watch while the page is on view: load() reads the
 * page's state each time the watch opens (first, and after every
 * reconnect, so a page recovers from a lost connection with nothing
 * missed), or after 5 s without it opening; on(e) gets each event. It
 * returns what the live badge shows.
 */
export function useFollow(req: WatchRequest, on: (e: Event) => void, load: () => void, deps: unknown[]): Live {
  const [live, setLive] = useState<Live>({ state: "connecting", text: "connecting…" });
  const handlers = useRef({ on, load });
  handlers.current = { on, load };
  useEffect(() => {
    const ac = new AbortController();
    let opened = false;
    const fallback = setTimeout(() => !opened && handlers.current.load(), 5000);
    const w = api().events.watch({ cursor: "now", ...req }, {
      signal: ac.signal,
      onOpen: () => {
        opened = true;
        setLive({ state: "live", text: "live" });
        handlers.current.load();
      },
      onReconnect: (err) => setLive({ state: "reconnecting", text: `connection lost (${err.code}), reconnecting…` }),
    });
    void (async () => {
      try {
        for await (const e of w) {
          handlers.current.on(e);
        }
      } catch (err) {
        if (!ac.signal.aborted) {
          setLive({ state: "failed", text: `not live: ${errorText(err)}` });
          if (!opened) {
            handlers.current.load();
          }
        }
      }
    })();
    return () => {
      clearTimeout(fallback);
      ac.abort();
    };
  }, deps);
  return live;
}

export function LiveBadge({ live }: { live: Live }): JSX.Element {
  return <span class={`live live-${live.state}`} id="live" data-live={live.state} role="status">{live.text}</span>;
}

// --- small components --------------------------------------------------------

/** "3 min ago", "in 5 min": relative, with the exact time on hover. */
export function Ago({ t }: { t: Timestamp }): JSX.Element {
  const d = toDate(t);
  if (!d) {
    return <span class="muted">—</span>;
  }
  const s = Math.round((d.getTime() - Date.now()) / 1000);
  const abs = Math.abs(s);
  const [n, unit] = abs < 60 ? [abs, "s"] : abs < 3600 ? [Math.round(abs / 60), "min"] : abs < 86400 ? [Math.round(abs / 3600), "h"] : [Math.round(abs / 86400), "d"];
  const text = abs < 5 ? "just now" : s < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
  return <time dateTime={d.toISOString()} title={d.toISOString()}>{text}</time>;
}

export function State({ s }: { s: string }): JSX.Element {
  return <span class={`state state-${s}`} data-state={s}>{s}</span>;
}

export function Muted({ children }: { children: ComponentChildren }): JSX.Element {
  return <span class="muted">{children}</span>;
}

export function ErrorLine({ err }: { err: unknown }): JSX.Element | null {
  return err === undefined || err === null ? null : <p class="error" role="alert">{errorText(err)}</p>;
}

/** The node's session: connected (green, with its gateway and since when) or disconnected (red, since when). */
export function SessionBadge({ n }: { n: Node }): JSX.Element {
  if (n.connected) {
    return (
      <span>
        <span class="session session-connected" data-session="connected" title={`gateway ${n.gateway || "?"}, session ${n.sessionEpoch}`}>connected</span>
        {" since "}<Ago t={n.connectedSince} />
      </span>
    );
  }
  if (!n.connectedSince) {
    return <span class="session session-never" data-session="never">never connected</span>;
  }
  return (
    <span>
      <span class="session session-disconnected" data-session="disconnected" title={`last gateway ${n.gateway || "?"}`}>disconnected</span>
      {n.disconnectedAt ? <span>{" since "}<Ago t={n.disconnectedAt} /></span> : <Muted> (its gateway stopped reporting)</Muted>}
    </span>
  );
}

/** Healthy (green) or unhealthy (red) with the failed checks, as nodes.list's health filter counts. */
export function HealthBadge({ n }: { n: Node }): JSX.Element {
  const title = n.checkedAt ? `latest diag.nvml settled ${toDate(n.checkedAt)!.toISOString()}` : "no diag.nvml settled yet";
  return (
    <span class="health-cell">
      <span class={`health health-${n.healthy ? "healthy" : "unhealthy"}`} data-health={n.healthy ? "healthy" : "unhealthy"} title={title}>
        {n.healthy ? "healthy" : "unhealthy"}
      </span>
      {n.failedChecks.map((c) => <a class="failed-check" href={href("nodes", { failedCheck: c })} key={c}>{c}</a>)}
    </span>
  );
}

/**
 * Whether a condition is a problem, by the rule Node.healthy follows
 * (controlplane/nodehealth): TrustBundle, NodeSpec and every type named
 * …Healthy or …Ready are good news when True and a problem when False
 * (but a TrustBundle False for reason "none", which the signing warning
 * covers); any other condition True is a problem.
 */
function problem(c: Node["conditions"][number]): boolean {
  const positive = c.type === "TrustBundle" || c.type === "NodeSpec" || c.type.endsWith("Healthy") || c.type.endsWith("Ready");
  if (c.status === "True") {
    return !positive;
  }
  if (c.status === "False" && c.type === "TrustBundle") {
    return c.reason !== "none";
  }
  return c.status === "False" && positive;
}

export function Conditions({ n }: { n: Node }): JSX.Element {
  if (n.conditions.length === 0) {
    return <Muted>no conditions</Muted>;
  }
  return (
    <ul class="conditions">
      {n.conditions.map((c) => (
        <li class={`cond cond-${c.status}${problem(c) ? " cond-problem" : ""}`} key={c.type} data-condition={c.type} data-problem={String(problem(c))}>
          <b>{c.type}</b> {c.status}{c.reason ? ` (${c.reason})` : ""}{c.message ? `: ${c.message}` : ""} <Ago t={c.since} />
        </li>
      ))}
    </ul>
  );
}

/**
 * rowKeys makes a table's rows reachable by keyboard: each row is a tab
 * stop; Enter opens it (its data-href), ArrowDown and ArrowUp move between
 * rows.
 */
export function rowKeys(open: string): { tabIndex: number; "data-href": string; onKeyDown: (e: KeyboardEvent) => void } {
  return {
    tabIndex: 0,
    "data-href": open,
    onKeyDown: (e: KeyboardEvent) => {
      const row = e.currentTarget as HTMLTableRowElement;
      if (e.key === "Enter" && e.target === row) {
        location.hash = open;
      } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        const next = (e.key === "ArrowDown" ? row.nextElementSibling : row.previousElementSibling) as HTMLElement | null;
        if (next?.tabIndex === 0) {
          e.preventDefault();
          next.focus();
        }
      }
    },
  };
}

/** A new idempotency key for one action of the console. */
export function newKey(what: string): string {
  return `console-${what}-${crypto.randomUUID()}`;
}
