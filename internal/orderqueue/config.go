package orderqueue

import (
	"fmt"
	"time"
)

// Config says where the queue is and how it is bounded. Its bounds are required: app.Defaults
// has the service's (sized for a sale of the service's size); the names default to the
// contract's.
type Config struct {
	// URLs are NATS servers (a JetStream cluster: any of its members); empty starts an embedded
	// server with JetStream, in-process, its store under DataDir — or connects to the one
	// another instance on the same DataDir runs (embed).
	URLs    []string
	DataDir string
	// Stream, Bucket and Consumer name the stream, the order records and the writers' durable
	// consumer, and Subjects the prefix of the stream's subjects (tests give unique ones: two
	// streams on one server may not share a subject).
	Stream, Bucket, Consumer, Subjects string
	// MaxMsgs and MaxBytes bound the queue: past them a publish is refused with ErrFull.
	MaxMsgs  int64
	MaxBytes int64
	// Duplicates is the de-duplication window: a message whose id was published within it is
	// dropped. It must outlast any retry of a publish.
	Duplicates time.Duration
	// AckWait is how long a writer may hold a message without acking it (a writer that is still
	// working says so with InProgress): past it the message goes to another writer. It bounds
	// how long a killed writer delays its orders.
	AckWait time.Duration
	// MaxAckPending bounds the messages handed to writers and not yet acked.
	MaxAckPending int
	// RecordTTL is how long an order record is kept: long after any order has left the queue.
	RecordTTL time.Duration
	// Replicas is how many servers keep the stream and the records; 0 is the cluster's size,
	// up to 3.
	Replicas int
	// Name names the connection, as the servers' monitoring shows it.
	Name string
}

// named gives the names left empty the contract's.
func (c *Config) named() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Stream, DefaultStream)
	def(&c.Bucket, DefaultBucket)
	def(&c.Consumer, DefaultConsumer)
	def(&c.Subjects, DefaultSubjects)
	def(&c.Name, "seckill")
}

// check refuses a queue without its bounds.
func (c Config) check() error {
	if c.MaxMsgs <= 0 || c.MaxBytes <= 0 || c.Duplicates <= 0 || c.AckWait <= 0 || c.MaxAckPending <= 0 || c.RecordTTL <= 0 {
		return fmt.Errorf("order queue bounds %+v: every bound is required (app.Defaults has the service's)", c)
	}
	return nil
}
