package handler_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
)

// TestWaitingRoomProduct: PUT takes a waiting room, pass_ttl_s defaulting to 120, GET shows
// it, a PUT without one removes it, and a room out of its bounds is a 400.
func TestWaitingRoomProduct(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)

	put := func(body string) productResponse {
		t.Helper()
		return decode[productResponse](t, s.do(t, http.MethodPut, productPath(sku), body, admin), http.StatusOK, productFields)
	}
	p := put(`{"name":"iPhone 17","stock":10,"waiting_room":{"admit_per_s":50}}`)
	require.NotNil(t, p.WaitingRoom)
	assert.Equal(t, 50, p.WaitingRoom.AdmitPerS)
	assert.Equal(t, 120, p.WaitingRoom.PassTTLS, "pass_ttl_s defaults to 120")
	assert.Equal(t, p, s.product(t, sku), "GET shows what PUT set")

	p = put(`{"name":"iPhone 17","stock":10,"waiting_room":{"admit_per_s":100000,"pass_ttl_s":3600}}`)
	assert.Equal(t, 100000, p.WaitingRoom.AdmitPerS)
	assert.Equal(t, 3600, p.WaitingRoom.PassTTLS)

	p = put(`{"name":"iPhone 17","stock":10}`)
	assert.Nil(t, p.WaitingRoom, "a PUT without a room removes it")
	assert.Nil(t, s.product(t, sku).WaitingRoom)

	for name, room := range map[string]string{
		"no admit_per_s":       `{}`,
		"admit_per_s 0":        `{"admit_per_s":0}`,
		"admit_per_s too high": `{"admit_per_s":100001}`,
		"pass_ttl_s 9":         `{"admit_per_s":1,"pass_ttl_s":9}`,
		"pass_ttl_s 0":         `{"admit_per_s":1,"pass_ttl_s":0}`,
		"pass_ttl_s too long":  `{"admit_per_s":1,"pass_ttl_s":3601}`,
		"unknown field":        `{"admit_per_s":1,"rate":2}`,
		"not an object":        `5`,
		"fractional":           `{"admit_per_s":1.5}`,
	} {
		t.Run(name, func(t *testing.T) {
			assertError(t, s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":1,"waiting_room":`+room+`}`, admin),
				http.StatusBadRequest, "invalid_argument")
		})
	}
}

// TestPutResetsRoom: a PUT starts the product's line again, empty.
func TestPutResetsRoom(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":10,"waiting_room":{"admit_per_s":5}}`, admin)
	rdb := backendtest.Redis(t)
	room := frontdoor.NewRoom(rdb, frontdoor.NewPasses(rdb, frontdoor.Options{}), frontdoor.Options{})
	p := frontdoor.Product{SKU: sku, Room: frontdoor.Config{AdmitPerS: 5}}
	_, err := room.Join(context.Background(), p, "u-1")
	require.NoError(t, err)
	stats, err := room.Stats(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Joined)

	s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":10,"waiting_room":{"admit_per_s":5}}`, admin)
	stats, err = room.Stats(context.Background(), p)
	require.NoError(t, err)
	assert.Zero(t, stats.Joined, "the new round's line is empty")
}
