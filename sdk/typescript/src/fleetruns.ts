// fleetRuns.wait: follows a fleet run until it ends, on the run's events
// rather than by polling, reading the run again after each one.
import type { CallOptions } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";

import type { ApiError } from "./errors.js";
import type { Event, WatchEventsRequestSchema } from "./gen/bc/api/v1/api_pb.js";
import type { FleetRun } from "./gen/bc/api/v1/fleetruns_pb.js";

/** The states in which a run has ended: every command settled. */
export const fleetRunEndStates: readonly string[] = Object.freeze(["succeeded", "failed", "cancelled"]);

/** Whether a run has ended (succeeded, failed or cancelled). */
export function fleetRunEnded(run: FleetRun): boolean {
  return fleetRunEndStates.includes(run.state);
}

/** The fleet.run.* event types, each published once the change it names is committed. */
export const fleetRunEventTypes: readonly string[] = Object.freeze([
  "fleet.run.created",
  "fleet.run.progress",
  "fleet.run.paused",
  "fleet.run.resumed",
  "fleet.run.cancel-requested",
  "fleet.run.stopping",
  "fleet.run.waiting",
  "fleet.run.finished",
]);

/** How fleetRuns.wait follows a run. */
export interface WaitRunOptions {
  /** Stops waiting: wait rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called with the run as read first, then after each of its events (counts, state, what it waits for). */
  onProgress?: (run: FleetRun) => void;
  /** Called before each reconnect of the underlying watch (see events.watch). */
  onReconnect?: (err: ApiError, cursor: string) => void;
}

/**
 * waitForRun resolves with the run once it has ended. It opens a watch of
 * the tenant's fleet.run.* events from "now" and reads the run only once
 * the watch is open, so that no change after that read is missed; each of
 * the run's events reads it again (the events carry no whole run). A run
 * already ended resolves at once.
 */
export async function waitForRun(
  get: (request: { tenantId: string; runId: string }, options?: CallOptions) => Promise<FleetRun>,
  watch: (
    request: MessageInitShape<typeof WatchEventsRequestSchema>,
    options: { signal: AbortSignal; onOpen: () => void; onReconnect?: (err: ApiError, cursor: string) => void },
  ) => AsyncIterable<Event>,
  request: { tenantId: string; runId: string },
  options: WaitRunOptions = {},
): Promise<FleetRun> {
  const ac = new AbortController();
  const outer = options.signal;
  const onAbort = () => ac.abort(outer?.reason);
  outer?.addEventListener("abort", onAbort, { once: true });
  if (outer?.aborted) {
    ac.abort(outer.reason);
  }
  let opened!: () => void;
  const open = new Promise<void>((resolve) => (opened = resolve));
  const events = watch({ tenantId: request.tenantId, cursor: "now", types: [...fleetRunEventTypes] }, {
    signal: ac.signal,
    onOpen: () => opened(),
    onReconnect: options.onReconnect,
  });
  const it = events[Symbol.asyncIterator]();
  try {
    // The first next() opens the stream; the run is read once it is open.
    const first = it.next();
    const aborted = new Promise<never>((_, reject) => {
      const fail = () => reject(ac.signal.reason ?? new Error("fleetRuns.wait was aborted"));
      if (ac.signal.aborted) {
        fail();
      }
      ac.signal.addEventListener("abort", fail, { once: true });
    });
    aborted.catch(() => undefined);
    // A watch that fails before it opens (UNAUTHENTICATED) rejects first.
    await Promise.race([open, first.then(() => undefined), aborted]);
    let run = await get(request, { signal: ac.signal });
    options.onProgress?.(run);
    let next = first;
    while (!fleetRunEnded(run)) {
      const r = await Promise.race([next, aborted]);
      if (r.done) {
        // The watch ends only through the signal.
        throw ac.signal.reason ?? new Error("fleetRuns.wait was aborted");
      }
      if (r.value.data?.runId === request.runId) {
        run = await get(request, { signal: ac.signal });
        options.onProgress?.(run);
      }
      next = it.next();
    }
    return run;
  } finally {
    outer?.removeEventListener("abort", onAbort);
    ac.abort();
    await it.return?.();
  }
}
