// Package console serves the web console, whose built assets (dist/, from
// src/ by sdk/typescript's pinned esbuild: make console) are embedded in
// bc-server. The console is a static page that calls the API for browsers
// on the same origin with the bearer token the user signs in with; the
// server holds no session for it.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed dist
var dist embed.FS

// Path is where the console is served.
const Path = "/console/"

// Handler serves the console's files under Path.
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic("console: the embedded dist directory is missing: " + err.Error())
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page runs only its own script and talks only to this origin.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
