package backendtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/stretchr/testify/require"
)

// Call sends one JSON request to the service at url with its admin token and decodes the answer
// into out (when out is not nil); it returns the status. It stops the test on a transport error:
// give it t on the test's goroutine, and an EventuallyWithT condition's CollectT inside one.
func Call(t require.TestingT, url, token, method, path, body string, out any) int {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	return resp.StatusCode
}
