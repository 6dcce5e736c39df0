package handler

import (
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestOpenAPI: the contract documents every route the router has and no route it lacks, every
// error code the handler can answer and no other, and it is what /openapi.yaml serves.
func TestOpenAPI(t *testing.T) {
	var doc struct {
		OpenAPI    string                    `yaml:"openapi"`
		Paths      map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas struct {
				ErrorDetail struct {
					Properties struct {
						Code struct {
							Enum []string `yaml:"enum"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"ErrorDetail"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(openAPI, &doc))
	assert.Equal(t, "3.1.0", doc.OpenAPI)

	reg := prometheus.NewRegistry()
	h, err := New(Config{Log: slog.New(slog.DiscardHandler), Registerer: reg, Gatherer: reg})
	require.NoError(t, err)
	param := regexp.MustCompile(`:([a-z_]+)`)
	routed := map[string]bool{}
	for _, r := range h.(*gin.Engine).Routes() {
		op := param.ReplaceAllString(r.Path, "{$1}") + " " + r.Method
		routed[op] = true
		methods, ok := doc.Paths[param.ReplaceAllString(r.Path, "{$1}")]
		assert.True(t, ok, "route %s is not documented", op)
		_, ok = methods[map[string]string{http.MethodGet: "get", http.MethodPut: "put", http.MethodPost: "post"}[r.Method]]
		assert.True(t, ok, "route %s is not documented", op)
	}
	for path, methods := range doc.Paths {
		for method := range methods {
			if method == "parameters" {
				continue
			}
			assert.True(t, routed[path+" "+map[string]string{"get": http.MethodGet, "put": http.MethodPut, "post": http.MethodPost}[method]],
				"%s %s is documented but not routed", method, path)
		}
	}

	answered := append(slices.Collect(maps.Keys(answers)), "internal")
	assert.ElementsMatch(t, answered, doc.Components.Schemas.ErrorDetail.Properties.Code.Enum,
		"the documented error codes are the ones the handler answers")

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, openAPI, rec.Body.Bytes())
}
