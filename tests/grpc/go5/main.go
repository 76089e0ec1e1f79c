// The official RocketMQ 5.x Go client (github.com/apache/rocketmq-clients/golang/v5) driven by
// tests/grpc/test_go5_client.py: `go5 SCENARIO JSON` runs one scenario against a 5.x gRPC
// endpoint and prints one line, `RESULT {json}`, with what the client saw. The client's own log
// goes to a file (rocketmq.client.logRoot, which the tests point at a temporary directory), so
// stdout holds nothing but that line.
//
// Scenarios:
//
//	produce        send `count` messages (body PREFIX-i, tag, keys, property i; message group
//	               groups[i % len(groups)] when `groups` is given), one at a time, in order;
//	               each receipt's message id, offset and the endpoint that took it.
//	simple_consume a SimpleConsumer receives and acks until `count` distinct bodies or `wait`
//	               seconds; every delivery with the broker and queue it came from.
//	push_consume   a PushConsumer consumes (SUCCESS) until `count` distinct bodies or `wait`
//	               seconds; deliveries in the order the listener saw them. The last ones
//	               may be unacknowledged when the program exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

type args struct {
	Endpoint  string   `json:"endpoint"`
	Topic     string   `json:"topic"`
	Group     string   `json:"group"`
	Count     int      `json:"count"`
	Prefix    string   `json:"prefix"`
	Tag       string   `json:"tag"`
	Groups    []string `json:"groups"`
	Wait      float64  `json:"wait"`      // seconds until a consumer gives up
	Await     float64  `json:"await"`     // a receive's long-polling seconds
	Invisible float64  `json:"invisible"` // a received message's invisible seconds
	Batch     int32    `json:"batch"`     // messages a receive asks for
	Timeout   float64  `json:"timeout"`   // a request's seconds
	TLS       bool     `json:"tls"`       // dial with TLS (the client's default)
}

func (a *args) defaults() {
	if a.Prefix == "" {
		a.Prefix = "go5"
	}
	if a.Tag == "" {
		a.Tag = "GoTag"
	}
	if a.Wait == 0 {
		a.Wait = 30
	}
	if a.Await == 0 {
		a.Await = 1
	}
	if a.Invisible == 0 {
		a.Invisible = 20
	}
	if a.Batch == 0 {
		a.Batch = 16
	}
	if a.Timeout == 0 {
		a.Timeout = 3
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func config(a *args, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      a.Endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{},
	}
}

func address(e *v2.Endpoints) string {
	var parts []string
	for _, addr := range e.GetAddresses() {
		parts = append(parts, addr.GetHost()+":"+strconv.Itoa(int(addr.GetPort())))
	}
	return strings.Join(parts, ",")
}

// queueOf reads the queue a MessageView was received from. The client keeps it in an unexported
// field and has no getter; the tests need it to tell which broker delivered a message.
func queueOf(mv *rmq.MessageView) *v2.MessageQueue {
	field := reflect.ValueOf(mv).Elem().FieldByName("messageQueue")
	if !field.IsValid() {
		return nil
	}
	return *(**v2.MessageQueue)(unsafe.Pointer(field.UnsafeAddr()))
}

func seen(mv *rmq.MessageView) map[string]any {
	record := map[string]any{
		"id":         mv.GetMessageId(),
		"topic":      mv.GetTopic(),
		"body":       string(mv.GetBody()),
		"keys":       mv.GetKeys(),
		"properties": mv.GetProperties(),
		"attempt":    mv.GetDeliveryAttempt(),
		"offset":     mv.GetOffset(),
	}
	if tag := mv.GetTag(); tag != nil {
		record["tag"] = *tag
	}
	if group := mv.GetMessageGroup(); group != nil {
		record["group"] = *group
	}
	if mq := queueOf(mv); mq != nil {
		record["broker"] = mq.GetBroker().GetName()
		record["queue"] = mq.GetId()
		record["endpoint"] = address(mq.GetBroker().GetEndpoints())
	}
	return record
}

func produce(a *args) (map[string]any, error) {
	producer, err := rmq.NewProducer(config(a, ""), rmq.WithTopics(a.Topic))
	if err != nil {
		return nil, err
	}
	if err := producer.Start(); err != nil {
		return nil, err
	}
	defer producer.GracefulStop()
	receipts := []map[string]any{}
	errs := []string{}
	for i := 0; i < a.Count; i++ {
		msg := &rmq.Message{Topic: a.Topic, Body: []byte(fmt.Sprintf("%s-%d", a.Prefix, i))}
		msg.SetTag(a.Tag)
		msg.SetKeys(fmt.Sprintf("%s-k%d", a.Prefix, i))
		msg.AddProperty("i", strconv.Itoa(i))
		if len(a.Groups) > 0 {
			msg.SetMessageGroup(a.Groups[i%len(a.Groups)])
		}
		ctx, cancel := context.WithTimeout(context.Background(), seconds(a.Timeout*3))
		sent, err := producer.Send(ctx, msg)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%d: %v", i, err))
			continue
		}
		for _, r := range sent {
			receipts = append(receipts, map[string]any{
				"i":          i,
				"message_id": r.MessageID,
				"offset":     r.Offset,
				"endpoint":   address(r.Endpoints),
			})
		}
	}
	return map[string]any{"receipts": receipts, "errors": errs}, nil
}

// collector keeps every delivery and counts distinct bodies; done closes at `count` of them.
type collector struct {
	mu       sync.Mutex
	messages []map[string]any
	bodies   map[string]bool
	count    int
	done     chan struct{}
}

func newCollector(count int) *collector {
	return &collector{messages: []map[string]any{}, bodies: map[string]bool{}, count: count, done: make(chan struct{})}
}

func (c *collector) add(mv *rmq.MessageView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.messages = append(c.messages, seen(mv))
	body := string(mv.GetBody())
	if !c.bodies[body] {
		c.bodies[body] = true
		if len(c.bodies) == c.count {
			close(c.done)
		}
	}
}

func (c *collector) result(errs []string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]any{"messages": c.messages, "errors": errs}
}

func simpleConsume(a *args) (map[string]any, error) {
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
	defer consumer.GracefulStop()
	got := newCollector(a.Count)
	errs := map[string]int{}
	deadline := time.Now().Add(seconds(a.Wait))
	for time.Now().Before(deadline) {
		select {
		case <-got.done:
			return got.result(summary(errs)), nil
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), seconds(a.Await+a.Timeout))
		views, err := consumer.Receive(ctx, a.Batch, seconds(a.Invisible))
		cancel()
		if err != nil {
			// An empty queue answers MESSAGE_NOT_FOUND as an error: not a failure.
			var status *rmq.ErrRpcStatus
			if !(errors.As(err, &status) && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND)) {
				errs[err.Error()]++
			}
			continue
		}
		for _, mv := range views {
			got.add(mv)
			ctx, cancel := context.WithTimeout(context.Background(), seconds(a.Timeout))
			if err := consumer.Ack(ctx, mv); err != nil {
				errs["ack: "+err.Error()]++
			}
			cancel()
		}
	}
	return got.result(summary(errs)), nil
}

func pushConsume(a *args) (map[string]any, error) {
	got := newCollector(a.Count)
	consumer, err := rmq.NewPushConsumer(config(a, a.Group),
		rmq.WithPushAwaitDuration(seconds(a.Await)),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{a.Topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{
			Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
				got.add(mv)
				return rmq.SUCCESS
			},
		}),
		rmq.WithPushConsumptionThreadCount(4),
	)
	if err != nil {
		return nil, err
	}
	if err := consumer.Start(); err != nil {
		return nil, err
	}
	select {
	case <-got.done:
	case <-time.After(seconds(a.Wait)):
	}
	// No GracefulStop: it waits out the receives in flight, whose long polling lasts what the
	// server's settings say (30 s), and the process ends with the result anyway.
	return got.result([]string{}), nil
}

func summary(errs map[string]int) []string {
	out := []string{}
	for text, n := range errs {
		out = append(out, fmt.Sprintf("%dx %s", n, text))
	}
	sort.Strings(out)
	return out
}

var scenarios = map[string]func(*args) (map[string]any, error){
	"produce":        produce,
	"simple_consume": simpleConsume,
	"push_consume":   pushConsume,
}

func main() {
	if os.Getenv("rocketmq.client.logLevel") == "" {
		os.Setenv("rocketmq.client.logLevel", "warn")
	}
	rmq.ResetLogger()
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go5 SCENARIO JSON")
		os.Exit(2)
	}
	run, ok := scenarios[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", os.Args[1])
		os.Exit(2)
	}
	var a args
	if err := json.Unmarshal([]byte(os.Args[2]), &a); err != nil {
		fmt.Fprintln(os.Stderr, "bad arguments:", err)
		os.Exit(2)
	}
	a.defaults()
	// The client dials TLS unless told otherwise; Apache's proxy and our brokers (by default)
	// answer TLS and plain text on one port.
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
}
