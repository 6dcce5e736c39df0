package frontdoor_test

import (
	"testing"

	"github.com/flashsale/seckill/internal/backendtest"
)

func TestMain(m *testing.M) { backendtest.Main(m) }
