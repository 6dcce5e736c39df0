package redisclient

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Channel is one Redis pub/sub channel: publish to it, and read it through one subscription.
type Channel struct {
	client redis.UniversalClient
	name   string
	sub    *redis.PubSub
}

// Subscribe subscribes to the channel name on c. Close it.
func Subscribe(ctx context.Context, c redis.UniversalClient, name string) *Channel {
	return &Channel{client: c, name: name, sub: c.Subscribe(ctx, name)}
}

// Publish sends msg to every subscriber.
func (c *Channel) Publish(ctx context.Context, msg string) error {
	return c.client.Publish(ctx, c.name, msg).Err()
}

// Receive waits up to timeout for the next message: its payload, or "" for a sign of life that is
// not one (a subscription confirmed, a pong). A timeout is an error whose Timeout() is true.
func (c *Channel) Receive(ctx context.Context, timeout time.Duration) (string, error) {
	msg, err := c.sub.ReceiveTimeout(ctx, timeout)
	if m, ok := msg.(*redis.Message); ok && err == nil {
		return m.Payload, nil
	}
	return "", err
}

// Ping asks the subscription's connection for a sign of life, which Receive then reads.
func (c *Channel) Ping(ctx context.Context) error { return c.sub.Ping(ctx) }

// Close ends the subscription, waking a Receive.
func (c *Channel) Close() error { return c.sub.Close() }
