package groupcommit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SetFunc runs many callers' items in one call on tx, the group's
// transaction (typically one statement over arrays of them), and returns
// each item's outcome in order: outs[i] for items[i]. Its error fails the
// call: the group is then run again with each caller alone, so that the
// caller whose item fails gets the error and the others' work commits. Like
// a Func it may run more than once and must not keep its items. When it is
// the group's last work, ctx carries the transaction's pgtx.Final: its last
// statements sent through pgtx.SendFinal then travel with COMMIT, and it
// must not use tx after them.
type SetFunc[I, O any] func(ctx context.Context, tx pgx.Tx, items []I) ([]O, error)

// Set is work that callers contribute items to: a group hands all its
// callers' items of one Set to the Set's function in one call. Where a
// function per caller (Do) costs the database a statement each, a Set costs
// one for the whole group: a fan-out's thousands of dispatches and reports
// are then tens of statements.
type Set[I, O any] struct {
	c  *Committer
	fn SetFunc[I, O]
}

// NewSet returns a Set whose items run in c's groups through fn.
func NewSet[I, O any](c *Committer, fn SetFunc[I, O]) *Set[I, O] {
	return &Set[I, O]{c: c, fn: fn}
}

// Do adds item to the next group and returns its outcome once the group's
// transaction committed, or the error that kept it from committing (the
// function's own, run alone, or the commit's). When ctx ends first Do
// returns ctx's error: the item may still commit, but it was not
// acknowledged.
func (s *Set[I, O]) Do(ctx context.Context, item I) (O, error) {
	si := &setItem[I, O]{item: item}
	r := &request{ctx: ctx, set: s, item: si, done: make(chan error, 1)}
	if err := s.c.do(ctx, r); err != nil {
		var zero O
		return zero, err
	}
	return si.out, nil
}

// setItem is one caller's item of a Set and the place its outcome is
// written, held by the request as a pointer: an item or outcome stored in
// an interface value of its own was copied to the heap at each Do and each
// run (a dispatch's outcome is a whole command row), a twentieth of the
// gateway's CPU in a fan-out to 10,000 nodes.
type setItem[I, O any] struct {
	item I
	out  O
}

// setRunner is a Set without its type parameters, for the worker.
type setRunner interface {
	runSet(ctx context.Context, tx pgx.Tx, reqs []*request) error
}

func (s *Set[I, O]) runSet(ctx context.Context, tx pgx.Tx, reqs []*request) error {
	items := make([]I, len(reqs))
	for i, r := range reqs {
		items[i] = r.item.(*setItem[I, O]).item
	}
	outs, err := s.fn(ctx, tx, items)
	if err != nil {
		return err
	}
	if len(outs) != len(items) {
		return fmt.Errorf("a set function answered %d of %d items", len(outs), len(items))
	}
	for i, r := range reqs {
		r.item.(*setItem[I, O]).out = outs[i] // assigned, not accumulated: a group may run again
	}
	return nil
}

// runSets runs the group's Set items, one call per Set, in the order each
// Set first appears in the group; the last call gets lastCtx (which may
// carry the transaction's pgtx.Final).
func runSets(ctx, lastCtx context.Context, tx pgx.Tx, group []*request) error {
	var order []setRunner
	bySet := map[setRunner][]*request{}
	for _, r := range group {
		if r.set == nil {
			continue
		}
		if _, ok := bySet[r.set]; !ok {
			order = append(order, r.set)
		}
		bySet[r.set] = append(bySet[r.set], r)
	}
	for i, s := range order {
		sctx := ctx
		if i == len(order)-1 {
			sctx = lastCtx
		}
		if err := s.runSet(sctx, tx, bySet[s]); err != nil {
			return err
		}
	}
	return nil
}
