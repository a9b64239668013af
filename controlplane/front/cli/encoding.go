package cli

import (
	"encoding/base64"
	"encoding/hex"
)

func base64Std(b []byte) string          { return base64.StdEncoding.EncodeToString(b) }
func hexEncode(b []byte) string          { return hex.EncodeToString(b) }
func hexDecode(s string) ([]byte, error) { return hex.DecodeString(s) }
