package bundles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
)

var (
	errTooLarge = errors.New("body over the URL's byte cap")
	errCutOff   = errors.New("upload cut off")
)

// UploadReceipt is the store's answer to a successful PUT.
type UploadReceipt struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Handler serves the store's presigned URLs under MountPath: PUT uploads,
// GET and HEAD downloads. It checks, in order, that the URL's method is the
// request's (405), the HMAC (403), the deadline (403), and for a PUT the cap:
// a Content-Length over it is refused before a byte is read (413), and the
// body is counted while it streams, so a chunked body cannot slip past.
// An upload lands under its key only when complete; a refusal or a cut-off
// leaves nothing.
func (s *DirStore) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *DirStore) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rel, ok := strings.CutPrefix(r.URL.Path, s.base.Path+"/")
	if !ok {
		http.Error(w, "not a blob path", http.StatusNotFound)
		return
	}
	key := rel
	logger := s.logger.With("key", key, "method", r.Method, "remote", r.RemoteAddr)
	refuse := func(code int, err error) {
		logger.Warn("refusing blob request", "status", code, "error", err)
		http.Error(w, err.Error(), code)
	}
	if err := CheckKey(key); err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	switch r.Method {
	case http.MethodPut, http.MethodGet, http.MethodHead:
	default:
		w.Header().Set("Allow", "PUT, GET, HEAD")
		refuse(http.StatusMethodNotAllowed, fmt.Errorf("%w: %s", errWrongMethod, r.Method))
		return
	}
	p, err := parseSignedQuery(r.URL.Query())
	if err != nil {
		refuse(http.StatusForbidden, err)
		return
	}
	if err := verify(s.secret, r.Method, key, p, s.now()); err != nil {
		code := http.StatusForbidden
		if errors.Is(err, errWrongMethod) {
			w.Header().Set("Allow", p.Method)
			code = http.StatusMethodNotAllowed
		}
		refuse(code, err)
		return
	}
	if r.Method != http.MethodPut {
		s.serveGet(w, r, key)
		return
	}
	if r.ContentLength > p.MaxBytes {
		refuse(http.StatusRequestEntityTooLarge, fmt.Errorf("%w: Content-Length %d over %d", errTooLarge, r.ContentLength, p.MaxBytes))
		return
	}
	n, sum, err := s.put(key, r.Body, r.ContentLength, p.MaxBytes, sha256Writer)
	switch {
	case errors.Is(err, errTooLarge):
		refuse(http.StatusRequestEntityTooLarge, err)
		return
	case errors.Is(err, errCutOff):
		refuse(http.StatusBadRequest, err)
		return
	case err != nil:
		logger.Error("storing upload", "error", err)
		http.Error(w, "storing the upload failed", http.StatusInternalServerError)
		return
	}
	logger.Info("stored blob", "size", n, "sha256", sum)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", strconv.Quote(sum))
	_ = json.NewEncoder(w).Encode(UploadReceipt{Key: key, Size: n, SHA256: sum})
}

func (s *DirStore) serveGet(w http.ResponseWriter, r *http.Request, key string) {
	f, info, err := s.Open(r.Context(), key)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, ErrNotFound) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/gzip")
	http.ServeContent(w, r, "", info.ModTime, f.(io.ReadSeeker))
}

func sha256Writer(w io.Writer) (io.Writer, func() string) {
	h := sha256.New()
	return io.MultiWriter(w, h), func() string { return hexSum(h) }
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
