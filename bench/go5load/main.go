// A timed load of the official RocketMQ 5.x Go client (github.com/apache/rocketmq-clients/golang/v5)
// for bench/grpc_side_by_side.py: the same program and settings against our broker's gRPC
// endpoint and against Apache's broker with its proxy in local mode.
//
//	go5load send    JSON   THREADS goroutines of one Producer send SIZE-byte messages
//	                       synchronously for SECONDS
//	go5load receive JSON   THREADS goroutines of one SimpleConsumer receive batches of BATCH
//	                       and ack every message (one goroutine per ack, a batch's acks in
//	                       parallel) until COUNT messages, SECONDS, or IDLE empty receives
//
// The program prints `STARTED` once the client has started (its route, settings and first
// heartbeat done), then runs the load and prints `RESULT {json}` the moment the load ends,
// before the client shuts down: the driver measures the broker's CPU between the two lines.
// The client's own log goes under rocketmq.client.logRoot (the driver points it at a
// temporary directory).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

type args struct {
	Endpoint  string  `json:"endpoint"`
	Topic     string  `json:"topic"`
	Group     string  `json:"group"`
	Seconds   float64 `json:"seconds"`   // the load's length (send), its limit (receive)
	Threads   int     `json:"threads"`   // sending or receiving goroutines
	Size      int     `json:"size"`      // body bytes of a message sent
	Count     int64   `json:"count"`     // messages to receive and ack
	Batch     int32   `json:"batch"`     // messages a receive asks for
	Await     float64 `json:"await"`     // a receive's long-polling seconds (its deadline: 5 s more)
	Invisible float64 `json:"invisible"` // a received message's invisible seconds
	Idle      int     `json:"idle"`      // empty receives in a row (all goroutines) that end a receive load
	TLS       bool    `json:"tls"`       // dial with TLS (the client's default)
}

func (a *args) defaults() {
	if a.Seconds == 0 {
		a.Seconds = 8
	}
	if a.Threads == 0 {
		a.Threads = 8
	}
	if a.Size == 0 {
		a.Size = 128
	}
	if a.Batch == 0 {
		a.Batch = 32
	}
	if a.Await == 0 {
		// Apache's proxy long-polls at least 5 s (grpcClientConsumerMinLongPollingTimeoutMillis)
		// and refuses a receive whose deadline leaves less.
		a.Await = 5
	}
	if a.Invisible == 0 {
		a.Invisible = 30
	}
	if a.Idle == 0 {
		a.Idle = 3
	}
}

// shutdown stops the client a load started: main calls it after printing the result.
var shutdown = func() {}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func config(a *args, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      a.Endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{},
	}
}

// errorCounts counts failures by text, for the result.
type errorCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

func (e *errorCounts) add(text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = map[string]int{}
	}
	e.counts[text]++
}

func (e *errorCounts) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []string{}
	for text, n := range e.counts {
		out = append(out, fmt.Sprintf("%dx %s", n, text))
	}
	sort.Strings(out)
	return out
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)) * p)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / float64(time.Millisecond)
}

func send(a *args) (map[string]any, error) {
	producer, err := rmq.NewProducer(config(a, ""), rmq.WithTopics(a.Topic))
	if err != nil {
		return nil, err
	}
	if err := producer.Start(); err != nil {
		return nil, err
	}
	shutdown = func() { _ = producer.GracefulStop() }
	fmt.Println("STARTED")
	body := make([]byte, a.Size)
	for i := range body {
		body[i] = 'x'
	}
	var errs errorCounts
	latencies := make([][]time.Duration, a.Threads)
	started := time.Now()
	stop := started.Add(seconds(a.Seconds))
	var wg sync.WaitGroup
	for t := 0; t < a.Threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			for time.Now().Before(stop) {
				msg := &rmq.Message{Topic: a.Topic, Body: body}
				msg.SetTag("bench")
				begin := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := producer.Send(ctx, msg)
				cancel()
				if err != nil {
					errs.add(err.Error())
					continue
				}
				latencies[t] = append(latencies[t], time.Since(begin))
			}
		}(t)
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	all := []time.Duration{}
	for _, part := range latencies {
		all = append(all, part...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return map[string]any{
		"sent":    len(all),
		"seconds": elapsed,
		"tps":     float64(len(all)) / elapsed,
		"p50_ms":  percentile(all, 0.50),
		"p99_ms":  percentile(all, 0.99),
		"errors":  errs.list(),
	}, nil
}

func receive(a *args) (map[string]any, error) {
	consumer, err := rmq.NewSimpleConsumer(config(a, a.Group),
		rmq.WithSimpleAwaitDuration(seconds(a.Await)),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{a.Topic: rmq.SUB_ALL}),
	)
	if err != nil {
		return nil, err
	}
	if err := consumer.Start(); err != nil {
		return nil, err
	}
	shutdown = func() { _ = consumer.GracefulStop() }
	fmt.Println("STARTED")
	var errs errorCounts
	var received, acked, empty atomic.Int64
	started := time.Now()
	deadline := started.Add(seconds(a.Seconds))
	// The time the last ack was answered: an empty receive that ends the load comes after it,
	// and long polling must not count as receiving time.
	var lastAck atomic.Int64
	// Cancelled once every message is acked: receives still long polling end at once.
	root, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	done := func() bool {
		return acked.Load() >= a.Count || empty.Load() >= int64(a.Idle) || time.Now().After(deadline)
	}
	var wg sync.WaitGroup
	for t := 0; t < a.Threads; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done() {
				ctx, cancel := context.WithTimeout(root, seconds(a.Await+5))
				views, err := consumer.Receive(ctx, a.Batch, seconds(a.Invisible))
				cancel()
				if err != nil && root.Err() != nil {
					break
				}
				if err != nil {
					var status *rmq.ErrRpcStatus
					if errors.As(err, &status) && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
						empty.Add(1)
					} else {
						errs.add(err.Error())
					}
					continue
				}
				empty.Store(0)
				received.Add(int64(len(views)))
				var acks sync.WaitGroup
				for _, mv := range views {
					acks.Add(1)
					go func(mv *rmq.MessageView) {
						defer acks.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := consumer.Ack(ctx, mv); err != nil {
							errs.add("ack: " + err.Error())
							return
						}
						lastAck.Store(time.Now().UnixNano())
						if acked.Add(1) >= a.Count {
							stopAll()
						}
					}(mv)
				}
				acks.Wait()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	if last := lastAck.Load(); last != 0 && acked.Load() >= a.Count {
		elapsed = time.Duration(last - started.UnixNano()).Seconds()
	}
	return map[string]any{
		"received": received.Load(),
		"acked":    acked.Load(),
		"seconds":  elapsed,
		"tps":      float64(acked.Load()) / elapsed,
		"errors":   errs.list(),
	}, nil
}

var loads = map[string]func(*args) (map[string]any, error){
	"send":    send,
	"receive": receive,
}

func main() {
	if os.Getenv("rocketmq.client.logLevel") == "" {
		os.Setenv("rocketmq.client.logLevel", "warn")
	}
	rmq.ResetLogger()
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go5load send|receive JSON")
		os.Exit(2)
	}
	run, ok := loads[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown load %q\n", os.Args[1])
		os.Exit(2)
	}
	var a args
	if err := json.Unmarshal([]byte(os.Args[2]), &a); err != nil {
		fmt.Fprintln(os.Stderr, "bad arguments:", err)
		os.Exit(2)
	}
	a.defaults()
	rmq.EnableSsl = a.TLS
	result, err := run(&a)
	if err != nil {
		result = map[string]any{"fatal": err.Error()}
	}
	line, err := json.Marshal(result)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot encode the result:", err)
		os.Exit(1)
	}
	fmt.Println("RESULT " + string(line))
	shutdown()
}
