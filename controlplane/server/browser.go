package server

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	connectcors "connectrpc.com/cors"
	"connectrpc.com/vanguard"
	"github.com/rs/cors"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/console"
)

// publicPackage is the protobuf package of the public API: every service in
// it is served to browsers, those that other issues add in new files too.
const publicPackage = "bc.api.v1."

// browserAPI is the public API in the forms a browser can call: the Connect
// protocol (JSON or binary, unary and server streams over HTTP/1.1) and
// gRPC-Web. It is not a second implementation: vanguard transcodes each
// call to gRPC and hands it to the API's own grpc.Server (its ServeHTTP),
// so the same interceptors authenticate it (bearer tokens), the same
// handlers authorize it, and the same limits hold (one identity's watches
// are counted across both listeners). It returns the handler and the
// path prefixes ("/bc.api.v1.Commands/") to mount it under.
//
// CORS is off unless browser.corsOrigins names origins: a page from another
// origin then may call the API (with its own bearer token; no cookies are
// read, so no credentials are allowed across origins).
func browserAPI(srv *grpc.Server, bc BrowserConfig) (http.Handler, []string, error) {
	var names []string
	for name := range srv.GetServiceInfo() {
		if strings.HasPrefix(name, publicPackage) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("browser API: no %s* service is registered", publicPackage)
	}
	services := make([]*vanguard.Service, 0, len(names))
	prefixes := make([]string, 0, len(names))
	for _, name := range names {
		services = append(services, vanguard.NewService(name, srv))
		prefixes = append(prefixes, "/"+name+"/")
	}
	// Only the proto codec reaches the grpc.Server, whose codec (decode.go)
	// turns an undecodable request into INVALID_INPUT; JSON from a browser
	// is transcoded to it first.
	tc, err := vanguard.NewTranscoder(services, vanguard.WithDefaultServiceOptions(
		vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
		vanguard.WithTargetCodecs(vanguard.CodecProto),
	))
	if err != nil {
		return nil, nil, fmt.Errorf("browser API: %w", err)
	}
	h := headersAtOnce(tc)
	if len(bc.CORSOrigins) == 0 {
		return h, prefixes, nil
	}
	for _, o := range bc.CORSOrigins {
		if o == "*" {
			return nil, nil, fmt.Errorf("browser.corsOrigins: name each origin (https://ops.example.com); \"*\" would let any page call the API with a token it holds")
		}
		if !strings.HasPrefix(o, "https://") && !strings.HasPrefix(o, "http://") {
			return nil, nil, fmt.Errorf("browser.corsOrigins: %q is not an origin: write scheme://host[:port]", o)
		}
	}
	c := cors.New(cors.Options{
		AllowedOrigins: bc.CORSOrigins,
		AllowedMethods: connectcors.AllowedMethods(),
		// authorization carries the bearer token.
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
		// bc-cursor: the cursor a watch starts after, before any event.
		ExposedHeaders: append(connectcors.ExposedHeaders(), "Bc-Cursor"),
		MaxAge:         7200,
	})
	return c.Handler(h), prefixes, nil
}

// mountBrowser mounts the API for browsers and the web console (at
// /console/, with / redirecting there) on the HTTP listener's mux.
func (s *Server) mountBrowser(mux *http.ServeMux, bc BrowserConfig, tls bool) error {
	h, prefixes, err := browserAPI(s.grpc, bc)
	if err != nil {
		return err
	}
	for _, p := range prefixes {
		mux.Handle(p, h)
	}
	mux.Handle(console.Path, console.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(console.Path, http.StatusFound))
	if !tls {
		s.logger.Warn("the API for browsers serves plain HTTP: set httpTls outside loopback and tests (bearer tokens cross it)")
	}
	s.logger.Info("serving the API for browsers (Connect, gRPC-Web)", "services", len(prefixes), "cors_origins", len(bc.CORSOrigins))
	return nil
}

// headersAtOnce sends a response's headers as soon as the API writes them.
// vanguard flushes a stream only at message boundaries, so a watch's
// headers (bc-cursor: the cursor it starts after, which tells a client that
// from now on it misses nothing) would wait for the first event, which may
// be long in coming.
func headersAtOnce(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(flushOnHeader{w}, r)
	})
}

type flushOnHeader struct{ http.ResponseWriter }

func (f flushOnHeader) WriteHeader(code int) {
	f.ResponseWriter.WriteHeader(code)
	f.Flush()
}

func (f flushOnHeader) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (f flushOnHeader) Unwrap() http.ResponseWriter { return f.ResponseWriter }
