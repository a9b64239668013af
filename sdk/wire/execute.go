package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// DefaultCancelGrace is how long a cancelled command has to report its real
// outcome before its stream is cut.
const DefaultCancelGrace = 10 * time.Second

// ErrNoOutcome is returned by Execute when ctx ended and the plugin did not
// report an outcome within the grace period: the host must say what it
// knows (cancelled, or timed out) without the plugin's word.
var ErrNoOutcome = errors.New("the plugin reported no outcome within the cancel grace")

// ErrNoResult is returned by Execute when the stream ended cleanly without a
// Result: a broken plugin.
var ErrNoResult = errors.New("the plugin ended the command without a result")

// Execute runs one command on a plugin and returns the plugin's own Result.
//
// The stream does not run on ctx. When ctx ends (the cancel, or the host's
// deadline), Execute sends Cancel and keeps reading, so the result that comes
// back is the plugin's real outcome, side effects included; cutting the stream
// at once would lose it. Only when the plugin says nothing for grace, or is
// too old to know Cancel, is the stream itself cancelled (ErrNoOutcome).
// Any other error is the stream's: the caller tells a crash (Unavailable, the
// process gone) from a plugin error.
func Execute(ctx context.Context, c *Client, req *pluginv1.ExecuteRequest, progress func(*pluginv1.Progress), grace time.Duration) (*pluginv1.Result, error) {
	if grace <= 0 {
		grace = DefaultCancelGrace
	}
	streamCtx, cutStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cutStream()

	// cancelled is closed once the stream is cut because ctx ended.
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer func() {
			close(cancelled) // before the cut, so the Recv error finds it closed
			cutStream()
		}()
		cctx, cancel := context.WithTimeout(streamCtx, grace)
		defer cancel()
		_, err := c.Cancel(cctx, &pluginv1.CancelRequest{CommandId: req.GetCommand().GetId()})
		if err != nil {
			// Unimplemented: a plugin built before Cancel; cutting the stream
			// is the only cancel it understands.
			return
		}
		<-cctx.Done()
	})
	defer stop()

	stream, err := c.KindPluginClient.Execute(streamCtx, req)
	if err != nil {
		return nil, classify(ctx, cancelled, err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, ErrNoResult
			}
			return nil, classify(ctx, cancelled, err)
		}
		switch e := ev.GetEvent().(type) {
		case *pluginv1.ExecuteEvent_Progress:
			if progress != nil {
				progress(e.Progress)
			}
		case *pluginv1.ExecuteEvent_Result:
			return e.Result, nil
		}
	}
}

// classify turns a stream error into ErrNoOutcome when it is our own cut.
func classify(ctx context.Context, cancelled <-chan struct{}, err error) error {
	if status.Code(err) == codes.Canceled && ctx.Err() != nil {
		select {
		case <-cancelled:
			return fmt.Errorf("%w: %w", ErrNoOutcome, context.Cause(ctx))
		default:
		}
	}
	return err
}
