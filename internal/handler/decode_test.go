package handler

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodersAgree holds the hot path's decoder (parsed) to encoding/json's (decodeStrict) on
// every body a request can carry: a body the fast one takes, encoding/json takes too, into the
// same value. A body the fast one refuses costs only time, since decodeStrict then decides it.
// Planted loose-fast-decode (unknown fields taken) fails here on the inputs it adds.
func FuzzDecodersAgree(f *testing.F) {
	for _, seed := range []string{
		`{"user_id":"u-1"}`,
		`{"user_id":"u-1","quantity":2,"strategy":"hybrid"}`,
		`{"user_id":"u-1","qty":1}`,
		`{"USER_ID":"u-1","Quantity":1}`,
		`{"user_id":"u-1","user_id":"u-2"}`,
		`{"user_id":"u\u0001","quantity":1e30}`,
		`{"user_id":"\ud800"}`,
		`{"user_id":null,"quantity":1.0}`,
		`{"user_id":"u-1"} {"user_id":"u-2"}`,
		`{"user_id":"u-1","lines":[{"sku":"p1","quantity":1},{"sku":"p2"}]}`,
		`{"user_id":"u-1","lines":[{"sku":"p1","colour":"red"}]}`,
		`{"name":"x","stock":10,"starts_at":"2026-12-07T10:00:00Z","waiting_room":{"admit_per_s":5}}`,
		`{"name":"x","stock":10,"price":999}`,
		`null`, `[]`, `"u-1"`, `1`, ` `, `{`,
	} {
		f.Add(seed)
	}
	bodies := []func() any{
		func() any { return &orderBody{sku: "p1"} },
		func() any { return &checkoutBody{} },
		func() any { return &productBody{} },
		func() any {
			return &struct {
				UserID *string `json:"user_id"`
			}{}
		},
	}
	f.Fuzz(func(t *testing.T, body string) {
		raw := []byte(body)
		if !utf8.Valid(raw) {
			return // refused before either decoder runs
		}
		for _, newBody := range bodies {
			fast, strict := newBody(), newBody()
			if !parsed(raw, fast) {
				continue
			}
			require.NoError(t, decodeStrict(raw, strict), "the fast decoder took %q into %T, which encoding/json refuses", body, fast)
			require.Equal(t, strict, fast, "the decoders read %q differently", body)
		}
	})
}
