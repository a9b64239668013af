package server

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// A request gRPC cannot decode (JSON nested deeper than the protobuf
// decoder's recursion limit, a string that is not UTF-8) is the caller's
// mistake, but gRPC answers it INTERNAL ("failed to unmarshal the received
// message") before any interceptor or handler runs. decodeChecks makes it
// INVALID_INPUT: its codec keeps the decoder's error for the message instead
// of failing, and its interceptors, which run next with that very message,
// refuse the call with the error. The limit itself stays: a deeper request
// is never decoded.
type decodeChecks struct {
	codec encoding.CodecV2
	// failed maps a request message that did not decode to why.
	failed sync.Map
}

func newDecodeChecks() *decodeChecks {
	return &decodeChecks{codec: encoding.GetCodecV2("proto")}
}

// serverCodec is the codec the API's server uses.
func (d *decodeChecks) serverCodec() encoding.CodecV2 { return decodeCodec{d} }

type decodeCodec struct{ d *decodeChecks }

func (c decodeCodec) Name() string { return c.d.codec.Name() }

func (c decodeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.d.codec.Marshal(v) }

// Unmarshal decodes as the proto codec does; a message that does not decode
// is left empty and remembered, and the interceptors refuse its call.
func (c decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.d.codec.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	c.d.failed.Store(v, err)
	return nil
}

// refusal is the API error for a request that did not decode, nil when it did.
func (d *decodeChecks) refusal(req any) error {
	v, failed := d.failed.LoadAndDelete(req)
	if !failed {
		return nil
	}
	msg := v.(error).Error()
	if strings.Contains(msg, "recursion depth") {
		return apierr.New(errcode.InvalidInput,
			"the request is nested too deeply to decode: JSON (a payload or a spec) may nest at most about 3,000 levels",
			map[string]string{"field": "request", "reason": "too-deep"})
	}
	return apierr.New(errcode.InvalidInput, "the request does not decode: "+msg, map[string]string{"field": "request", "reason": "malformed-request"})
}

// unary refuses a unary call whose request did not decode. It must come
// before any interceptor that can end a call early, so that every failed
// request is looked up (and forgotten) here.
func (d *decodeChecks) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := d.refusal(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// stream refuses a stream's message that did not decode when it is received.
func (d *decodeChecks) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &decodeStream{ServerStream: ss, d: d})
	}
}

type decodeStream struct {
	grpc.ServerStream
	d *decodeChecks
}

func (s *decodeStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.d.refusal(m)
}
