package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/stock"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestConfigPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(t *testing.T, c *config)
	}{
		{"defaults", nil, nil, func(t *testing.T, c *config) {
			assert.Equal(t, ":8080", c.Addr)
			assert.Equal(t, "hybrid", c.Service.Strategy)
			assert.True(t, c.Service.StrategyOverride)
			assert.False(t, c.Service.AllowUnsafe)
			assert.Equal(t, "./.seckill", c.DataDir)
			assert.Equal(t, 64, c.Service.GroupCommit)
			assert.Equal(t, stock.NoWait, c.Service.RowLock)
			assert.Equal(t, time.Second, c.Service.SoldOutFlag)
			assert.Empty(t, c.PprofAddr)
			assert.True(t, c.tokenGenerated)
			assert.Len(t, c.AdminToken, 32)
		}},
		{"env", map[string]string{"SECKILL_ADDR": ":9", "SECKILL_ALLOW_UNSAFE": "true", "SECKILL_LOCK_WAIT": "3s", "SECKILL_ADMIN_TOKEN": "tok",
			"SECKILL_ROW_LOCK": "wait"}, nil,
			func(t *testing.T, c *config) {
				assert.Equal(t, ":9", c.Addr)
				assert.Equal(t, stock.WaitForRow, c.Service.RowLock)
				assert.True(t, c.Service.AllowUnsafe)
				assert.Equal(t, 3*time.Second, c.Service.LockWait)
				assert.Equal(t, "tok", c.AdminToken)
				assert.False(t, c.tokenGenerated)
			}},
		{"rate limit", map[string]string{"SECKILL_RATE_LIMIT": "50", "SECKILL_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1"}, nil,
			func(t *testing.T, c *config) {
				assert.InDelta(t, 50.0, c.RateLimit, 0)
				assert.Equal(t, 100, c.RateBurst, "the burst defaults to twice the rate")
				assert.Equal(t, []string{"10.0.0.0/8", "192.168.1.1"}, c.TrustedProxies)
			}},
		{"flag wins over env", map[string]string{"SECKILL_STRATEGY": "dblock"}, []string{"-strategy", "naive", "-strategy-override=false"},
			func(t *testing.T, c *config) {
				assert.Equal(t, "naive", c.Service.Strategy)
				assert.False(t, c.Service.StrategyOverride)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(tc.args, env(tc.env))
			require.NoError(t, err)
			tc.want(t, c)
		})
	}
}

func TestConfigRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"bad bool env":       {env: map[string]string{"SECKILL_ALLOW_UNSAFE": "maybe"}},
		"bad duration env":   {env: map[string]string{"SECKILL_LOCK_TTL": "soon"}},
		"zero duration":      {args: []string{"-lock-wait", "0s"}},
		"unknown flag":       {args: []string{"-nope"}},
		"stray argument":     {args: []string{"extra"}},
		"unknown logformat":  {env: map[string]string{"SECKILL_LOG_FORMAT": "xml"}},
		"negative rate":      {args: []string{"-rate-limit", "-1"}},
		"negative batch":     {args: []string{"-group-commit", "-1"}},
		"negative flag ttl":  {args: []string{"-sold-out-flag", "-1s"}},
		"unknown redis mode": {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379", "SECKILL_REDIS_MODE": "ring"}},
		"single, two addrs":  {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379,127.0.0.1:6380", "SECKILL_REDIS_MODE": "single"}},
		"sentinel, no name":  {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:26379", "SECKILL_REDIS_MODE": "sentinel"}},
		"name, not sentinel": {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379", "SECKILL_REDIS_MASTER": "m1"}},
		"mode, embedded":     {env: map[string]string{"SECKILL_REDIS_MODE": "cluster"}},
		"unknown row lock":   {args: []string{"-row-lock", "NOWAIT"}},
		"reservation lease":  {env: map[string]string{"SECKILL_RESERVATION_LEASE": "10s"}},
		"no event streams":   {env: map[string]string{"SECKILL_EVENTS_MAX": "0"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig(tc.args, env(tc.env))
			assert.Error(t, err)
		})
	}
	_, err := loadConfig(nil, env(map[string]string{"SECKILL_ROW_LOCK": "skip-locked"}))
	assert.EqualError(t, err, `SECKILL_ROW_LOCK: row lock "skip-locked": want nowait or wait`, "refused at start, saying what it takes")
}

func TestConfigPrintMasksSecrets(t *testing.T) {
	c, err := loadConfig(nil, env(map[string]string{
		"SECKILL_ADMIN_TOKEN": "s3cret-token", "SECKILL_MYSQL_DSN": "root:pw@tcp(db:3306)/seckill",
	}))
	require.NoError(t, err)
	var out bytes.Buffer
	c.print(&out)
	assert.NotContains(t, out.String(), "s3cret-token")
	assert.NotContains(t, out.String(), "pw@tcp")
	assert.Contains(t, out.String(), "SECKILL_MYSQL_DSN")
	assert.Contains(t, out.String(), "SECKILL_STRATEGY_OVERRIDE")
}
