package bundles

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sigV4Credentials sign S3 requests.
type sigV4Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

// presignV4 returns u with AWS Signature Version 4 query parameters for
// method, valid for expires from now: the algorithm of "Authenticating
// Requests: Using Query Parameters", signing only the host header and an
// UNSIGNED-PAYLOAD. u's path must be unescaped; it is encoded here.
func presignV4(method string, u *url.URL, region string, cred sigV4Credentials, now time.Time, expires time.Duration) string {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	scope := day + "/" + region + "/s3/aws4_request"

	q := url.Values{}
	for k, v := range u.Query() {
		q[k] = v
	}
	q.Set("X-Amz-Algorithm", "AWS4-HMAC-SHA256")
	q.Set("X-Amz-Credential", cred.AccessKeyID+"/"+scope)
	q.Set("X-Amz-Date", amzDate)
	q.Set("X-Amz-Expires", strconv.FormatInt(int64(expires/time.Second), 10))
	q.Set("X-Amz-SignedHeaders", "host")
	if cred.SessionToken != "" {
		q.Set("X-Amz-Security-Token", cred.SessionToken)
	}
	canonicalQuery := canonicalQueryV4(q)
	canonicalURI := uriEncode(u.Path, false)
	if canonicalURI == "" {
		canonicalURI = "/"
	}
	canonicalRequest := strings.Join([]string{
		method,
		canonicalURI,
		canonicalQuery,
		"host:" + u.Host + "\n",
		"host",
		"UNSIGNED-PAYLOAD",
	}, "\n")
	crHash := sha256.Sum256([]byte(canonicalRequest))
	stringToSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(crHash[:])

	k := hmacSHA256([]byte("AWS4"+cred.SecretAccessKey), day)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, "s3")
	k = hmacSHA256(k, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(k, stringToSign))

	return fmt.Sprintf("%s://%s%s?%s&X-Amz-Signature=%s", u.Scheme, u.Host, canonicalURI, canonicalQuery, sig)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// canonicalQueryV4 sorts by name then value, each URI-encoded.
func canonicalQueryV4(q url.Values) string {
	type kv struct{ k, v string }
	var pairs []kv
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, kv{uriEncode(k, true), uriEncode(v, true)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p.k + "=" + p.v
	}
	return strings.Join(parts, "&")
}

// uriEncode is SigV4's UriEncode: every byte but A-Z a-z 0-9 - . _ ~ is
// %XX-encoded in upper case, and "/" too when encodeSlash.
func uriEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
