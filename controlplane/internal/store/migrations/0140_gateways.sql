-- 0140_gateways: the gateways that hold node sessions, each with how many
-- it holds (issue 34: "what gateways do to shed load when one holds far
-- more than the others"). Each gateway process writes its own row every
-- few seconds (controlplane/fleet/gateways.Beat) and deletes it when it
-- stops; a gateway that died stops refreshing seen_at and no longer counts
-- once the row is stale. id is the process's own (a random id drawn at
-- start), so two gateways on one host, whose names may be the same, never
-- share a row; name is what nodes.session_gateway shows.
CREATE TABLE gateways (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    sessions   integer NOT NULL CHECK (sessions >= 0),
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
