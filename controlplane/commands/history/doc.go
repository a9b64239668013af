// Package history is the command history's retention: settled commands,
// the outbox's events and River's finished jobs older than a tenant's
// retention are archived to the support-bundle blob store, then deleted
// from the hot tables in bounded batches (Archiver), by one replica at a
// time (Runner, under a lease as the sweeper's); and the archive is read
// back (Search, Export) so a command settled a year ago can still be found
// by id, node, kind or requester.
//
// The archive is one object per tenant and hour,
// history/{tenant}/{yyyy}/{mm}/{dd}/{hh}.jsonl.zst: zstd-compressed JSON
// lines, each a Record holding one row as PostgreSQL's to_jsonb wrote it
// (every column, so nothing the audit needs is left behind): the commands
// settled in that hour, the events created in it, and for the fleet
// (tenant "", stored as _fleet) River's jobs finalized in it. Beside the
// objects, history/{tenant}/manifest.json lists each object with its
// counts, its hour and its SHA-256, which readers check.
//
// Crash safety comes from the order (object, then manifest, then the
// deletes) and from how an hour is written: the new object is the old one
// (when there is one) followed by the rows not already in it, so a rerun of
// an hour whose rows were not yet deleted writes the same bytes, and rows
// held back once (an open batch's) join their hour's object later.
package history
