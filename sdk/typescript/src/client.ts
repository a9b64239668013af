// The client on any Connect transport: createClient in node.ts and web.ts
// picks the transport (connect-node in Node, connect-web in a browser).
import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { Code, createClient as createConnectClient } from "@connectrpc/connect";
import type { CallOptions, Client, Interceptor, Transport } from "@connectrpc/connect";

import { ApiError } from "./errors.js";
import { waitForRun } from "./fleetruns.js";
import type { WaitRunOptions } from "./fleetruns.js";
import { CommandBatches, Commands, Events, Nodes } from "./gen/bc/api/v1/api_pb.js";
import type { CommandBatch, Event, WatchEventsRequestSchema } from "./gen/bc/api/v1/api_pb.js";
import { Fleet, Kinds } from "./gen/bc/api/v1/fleet_pb.js";
import { FleetRuns } from "./gen/bc/api/v1/fleetruns_pb.js";
import { Pools, Reconciler } from "./gen/bc/api/v1/pools_pb.js";
import type { FleetRun } from "./gen/bc/api/v1/fleetruns_pb.js";

/** What createClient needs: where the API is and the bearer token. */
export interface ClientOptions {
  /** The API's HTTP address (bc-server's httpListen): "https://bc.example.com". */
  baseUrl: string;
  /** The bearer token of an identity in bc-server's auth. */
  token: string;
}

/** A CommandBatch with batchId, the name the spec's snippets read its id by. */
export type Batch = CommandBatch & { readonly batchId: string };

/** How events.watch reconnects after the stream breaks. */
export interface WatchOptions {
  /** Ends the watch (the iterator returns). */
  signal?: AbortSignal;
  /** The first reconnect's delay (250 ms), doubled each time up to maxDelayMs (10 s). */
  minDelayMs?: number;
  maxDelayMs?: number;
  /**
   * Called each time the stream is open, with the cursor it starts after
   * (the server resolves "now" to one): from then on the watch sees every
   * event, so a consumer reads state only after it (no event is missed).
   */
  onOpen?: (cursor: string) => void;
  /** Called before each reconnect with the error that broke the stream and the cursor it resumes after. */
  onReconnect?: (err: ApiError, cursor: string) => void;
}

// cursorHeader is the response header in which events.watch names the
// cursor it starts after, before any event.
const cursorHeader = "bc-cursor";

// A break that a reconnect can mend: the server went away (a restart, a
// replica draining with UNAVAILABLE), the network dropped, a proxy timed out.
const transient = new Set<Code>([Code.Unavailable, Code.Unknown, Code.DeadlineExceeded, Code.Aborted, Code.Internal]);

/**
 * A watch of the tenant's events: an async iterator that follows new events
 * and, when the stream breaks, reconnects from the cursor of the last event
 * it yielded, so a consumer sees each event once, in order.
 */
export class EventWatch implements AsyncIterable<Event> {
  /** The cursor of the last event yielded ("" before the first). */
  cursor: string;
  /** How many times the watch reconnected. */
  reconnects = 0;

  constructor(
    private readonly events: Client<typeof Events>,
    private readonly request: MessageInitShape<typeof WatchEventsRequestSchema>,
    private readonly options: WatchOptions,
  ) {
    this.cursor = request.cursor ?? "";
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Event> {
    // The watch's own signal ends the stream when the consumer stops (a
    // break, return()) as well as on the caller's signal.
    const ac = new AbortController();
    const outer = this.options.signal;
    const onAbort = () => ac.abort(outer?.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    if (outer?.aborted) {
      ac.abort(outer.reason);
    }
    try {
      yield* this.follow(ac.signal);
    } finally {
      outer?.removeEventListener("abort", onAbort);
      ac.abort();
    }
  }

  private async *follow(signal: AbortSignal): AsyncGenerator<Event> {
    const min = this.options.minDelayMs ?? 250;
    const max = this.options.maxDelayMs ?? 10_000;
    let delay = min;
    for (;;) {
      let broke: ApiError;
      try {
        const onHeader = (headers: Headers) => {
          // The cursor the server starts after ("now" resolved), so that a
          // reconnect before the first event resumes there, not at a later "now".
          const start = headers.get(cursorHeader);
          if (start !== null && start !== "") {
            this.cursor = start;
          }
          this.options.onOpen?.(this.cursor);
        };
        for await (const e of this.events.watch({ ...this.request, cursor: this.cursor }, { signal, onHeader })) {
          this.cursor = e.cursor;
          delay = min;
          yield e;
        }
        // The server ended the stream without an error: follow on.
        broke = new ApiError("UNAVAILABLE", "the watch ended", {}, Code.Unavailable);
      } catch (err) {
        if (signal?.aborted) {
          return;
        }
        broke = ApiError.from(err);
        if (!transient.has(broke.connectCode)) {
          throw broke;
        }
      }
      this.options.onReconnect?.(broke, this.cursor);
      if (!(await sleep(delay, signal))) {
        return;
      }
      delay = Math.min(delay * 2, max);
      this.reconnects++;
    }
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

// unaryWithApiErrors wraps each unary method of a Connect client so that it
// throws ApiError; then maps each result through post.
function unaryWithApiErrors<S extends DescService>(service: S, c: Client<S>, post: (v: any) => any = (v) => v): Client<S> {
  const out: Record<string, unknown> = {};
  for (const m of service.methods) {
    const f = (c as Record<string, (...a: unknown[]) => unknown>)[m.localName];
    out[m.localName] =
      m.methodKind === "unary"
        ? async (req: unknown, opts?: CallOptions) => {
            try {
              return post(await f(req, opts));
            } catch (err) {
              throw ApiError.from(err);
            }
          }
        : f;
  }
  return out as Client<S>;
}

function withBatchId(b: CommandBatch): Batch {
  return Object.defineProperty(b, "batchId", { value: b.id, enumerable: false }) as Batch;
}

/**
 * The client: commands, commandBatches, events, fleet, fleetRuns, kinds,
 * nodes, pools and reconciler, with the spec's method and field names.
 */
export interface BetterComputeClient {
  /**
   * commands.run, get, list, cancel: the Commands service as generated.
   * commands.get takes a commandId alone (nodeId is optional); commands.list
   * without nodeId lists the tenant's commands on every node the caller may
   * read, newest first, filtered by kind, state, reason, runId, batchId,
   * requester, since, until and settledSince.
   */
  commands: Client<typeof Commands>;
  commandBatches: Omit<Client<typeof CommandBatches>, "create" | "get" | "approve" | "list"> & {
    create(...a: Parameters<Client<typeof CommandBatches>["create"]>): Promise<Batch>;
    get(...a: Parameters<Client<typeof CommandBatches>["get"]>): Promise<Batch>;
    approve(...a: Parameters<Client<typeof CommandBatches>["approve"]>): Promise<Batch>;
    list(...a: Parameters<Client<typeof CommandBatches>["list"]>): Promise<{ items: Batch[]; }>;
  };
  events: {
    /** for await (const e of client.events.watch({ tenantId, cursor })) — resumes from its cursor after a reconnect. */
    watch(request: MessageInitShape<typeof WatchEventsRequestSchema>, options?: WatchOptions): EventWatch;
  };
  /**
   * fleetRuns.create, get, list, listTargets, pause, resume, cancel: the
   * FleetRuns service as generated; and wait, which resolves with the run
   * once it has ended, following its fleet.run.* events.
   */
  fleetRuns: Client<typeof FleetRuns> & {
    /**
     * await client.fleetRuns.wait({ tenantId, runId }, { onProgress }) → the
     * ended run (succeeded, failed or cancelled). It reads the run once its
     * event watch is open and again after each of the run's events, so no
     * change is missed and nothing polls.
     */
    wait(request: { tenantId: string; runId: string }, options?: WaitRunOptions): Promise<FleetRun>;
  };
  /**
   * fleet.summary ({ tenantId } → FleetSummary): the nodes the caller reads,
   * connected, healthy and unhealthy, by condition, failed check and pool;
   * the work in flight; and whether the control plane signs commands
   * (commandSigning).
   */
  fleet: Client<typeof Fleet>;
  /**
   * kinds.list ({ apiRunnableOnly } → { items }) and kinds.get ({ name,
   * version }): the registered command kinds with their flags and payload
   * schema (payloadSchema, JSON Schema text).
   */
  kinds: Client<typeof Kinds>;
  /**
   * nodes.get, nodes.list ({ tenantId, pool, selector, condition, connected, health, query, failedCheck, limit,
   * cursor } → { items, nextCursor }: the nodes with their sessions, labels and health), nodes.setLabels
   * ({ tenantId, nodeId, labels, remove, replace } → the node), nodes.create, …: the Nodes service as generated.
   */
  nodes: Client<typeof Nodes>;
  /** pools.list, get, setBudget, resetBreaker, setNodePool, listLocks: the Pools service as generated. */
  pools: Client<typeof Pools>;
  /** reconciler.plan ({ tenantId, pool, includeFinished } → { items }) and reconciler.listBatches: the platform's remediations. */
  reconciler: Client<typeof Reconciler>;
}

/** bearer adds the token to every call. */
export function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
}

/** createClientOn builds the client on a transport (which must send the token). */
export function createClientOn(transport: Transport): BetterComputeClient {
  const events = createConnectClient(Events, transport);
  const fleetRuns = unaryWithApiErrors(FleetRuns, createConnectClient(FleetRuns, transport));
  return {
    commands: unaryWithApiErrors(Commands, createConnectClient(Commands, transport)),
    commandBatches: unaryWithApiErrors(CommandBatches, createConnectClient(CommandBatches, transport), (v) => {
      if (v?.$typeName === "bc.api.v1.CommandBatch") {
        return withBatchId(v);
      }
      if (v?.$typeName === "bc.api.v1.ListCommandBatchesResponse") {
        v.items.forEach(withBatchId);
      }
      return v;
    }) as unknown as BetterComputeClient["commandBatches"],
    events: { watch: (request, options = {}) => new EventWatch(events, request, options) },
    fleetRuns: {
      ...fleetRuns,
      wait: (request, options) =>
        waitForRun(fleetRuns.get, (req, opts) => new EventWatch(events, req, opts), request, options),
    },
    fleet: unaryWithApiErrors(Fleet, createConnectClient(Fleet, transport)),
    kinds: unaryWithApiErrors(Kinds, createConnectClient(Kinds, transport)),
    nodes: unaryWithApiErrors(Nodes, createConnectClient(Nodes, transport)),
    pools: unaryWithApiErrors(Pools, createConnectClient(Pools, transport)),
    reconciler: unaryWithApiErrors(Reconciler, createConnectClient(Reconciler, transport), (v) => {
      if (v?.$typeName === "bc.api.v1.ListPlatformBatchesResponse") {
        v.items.forEach(withBatchId);
      }
      return v;
    }),
  };
}
