// @better-compute/client: the public API of better-compute from TypeScript.
// Import createClient from "@better-compute/client" (Node picks node.ts,
// bundlers for browsers web.ts); this module holds what both share.
export { ApiError, decodeErrorInfo, errorDomain } from "./errors.js";
export type { ApiErrorCode, ErrorInfo } from "./errors.js";
export { EventWatch, bearer, createClientOn } from "./client.js";
export type { Batch, BetterComputeClient, ClientOptions, WatchOptions } from "./client.js";
export { fleetRunEndStates, fleetRunEnded, fleetRunEventTypes } from "./fleetruns.js";
export type { WaitRunOptions } from "./fleetruns.js";
export * from "./gen/bc/api/v1/api_pb.js";
export * from "./gen/bc/api/v1/fleet_pb.js";
export * from "./gen/bc/api/v1/fleetruns_pb.js";
export * from "./gen/bc/api/v1/pools_pb.js";
export { jsonOf, toDate } from "./values.js";
