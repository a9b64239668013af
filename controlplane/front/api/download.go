package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

// BundlePath is where bc-server serves support bundles to callers with the
// node's read permission: GET BundlePath with the tenant, node and command
// ids, and the API's own bearer token in Authorization.
const BundlePath = "GET /v1/tenants/{tenantId}/nodes/{nodeId}/commands/{commandId}/bundle"

// BundleHandler streams a logs.collect command's support bundle from the
// blob store: the console's download link, and anyone with a token who
// would rather not hold the blob store's credentials (the CLI's `bundles
// download` reads the store directly). It authenticates as the API does
// (authn), authorizes compute:nodes:read on the node as commands.get does,
// and answers errors as JSON {code, message, details} with the HTTP status
// of the code.
func (s *Server) BundleHandler(authn *auth.Authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.serveBundle(w, r, authn); err != nil {
			writeHTTPError(w, err)
		}
	})
}

func (s *Server) serveBundle(w http.ResponseWriter, r *http.Request, authn *auth.Authenticator) error {
	ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", r.Header.Get("Authorization")))
	if r.Header.Get("Authorization") == "" {
		ctx = r.Context()
	}
	id, err := authn.Authenticate(ctx)
	if err != nil {
		return err
	}
	ctx = auth.NewContext(r.Context(), id)
	tenantID, nodeID, commandID := r.PathValue("tenantId"), r.PathValue("nodeId"), r.PathValue("commandId")
	if _, err := auth.AuthorizeNode(ctx, s.lookupNodeHistory, tenantID, nodeID, auth.PermNodesRead); err != nil {
		return err
	}
	if err := validID("commandId", commandID); err != nil {
		return err
	}
	cmd, err := s.queue.Get(ctx, s.pool, nodeID, commandID)
	if err != nil {
		return s.fail(ctx, "bundles.download", err)
	}
	if cmd.BundleKey == "" {
		return apierr.New(errcode.NotFound, fmt.Sprintf("command %s (%s) has no support bundle: only logs.collect uploads one", commandID, cmd.Kind),
			map[string]string{"commandId": commandID, "reason": "no-bundle"})
	}
	if s.bundles == nil {
		return apierr.New(errcode.Unsupported, "this server has no supportBundles store configured", map[string]string{"reason": "no-store"})
	}
	body, info, err := s.bundles.Store().Open(ctx, cmd.BundleKey)
	if errors.Is(err, bundles.ErrNotFound) {
		return apierr.New(errcode.NotFound, fmt.Sprintf("the bundle of %s is not uploaded (the command is %s): wait for it to succeed", commandID, cmd.State),
			map[string]string{"commandId": commandID, "reason": "not-uploaded", "state": string(cmd.State)})
	}
	if err != nil {
		return s.fail(ctx, "bundles.download", fmt.Errorf("opening bundle %s: %w", cmd.BundleKey, err))
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.tar.gz"`, nodeID, commandID))
	w.Header().Set("Cache-Control", "private, no-store")
	if _, err := io.Copy(w, body); err != nil {
		// The status is sent: the client sees a short body against
		// Content-Length.
		s.logger.Warn("support bundle download cut off", "command", commandID, "error", err)
	}
	return nil
}

// httpStatus maps the API's gRPC codes to HTTP statuses.
var httpStatus = map[codes.Code]int{
	codes.Unauthenticated: http.StatusUnauthorized, codes.PermissionDenied: http.StatusForbidden,
	codes.NotFound: http.StatusNotFound, codes.InvalidArgument: http.StatusBadRequest,
	codes.Unavailable: http.StatusServiceUnavailable, codes.Unimplemented: http.StatusNotImplemented,
	codes.FailedPrecondition: http.StatusConflict, codes.Canceled: 499, codes.DeadlineExceeded: http.StatusGatewayTimeout,
}

// writeHTTPError answers err as the API's JSON error.
func writeHTTPError(w http.ResponseWriter, err error) {
	in, ok := apierr.Parse(err)
	if !ok {
		in = apierr.Info{GRPC: codes.Internal, Code: errcode.Internal, Message: "internal error"}
	}
	st, found := httpStatus[in.GRPC]
	if !found {
		st = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": in.Code, "message": in.Message, "details": in.Details})
}
