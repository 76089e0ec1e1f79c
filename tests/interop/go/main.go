// Command interop-go runs scenarios of Apache RocketMQ's Go client (v2) against a name server:
//
//	interop-go namesrv=HOST:PORT broker=HOST:PORT prefix=NAME scenarios=send,orderly,...
//
// Every sent and received message is printed on stdout as one JSON line (the client's own logs go
// to stderr); tests/interop/test_go_client.py checks the content. Bodies follow body(), which the
// Python side recomputes.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

var (
	out     sync.Mutex
	opts    = map[string]string{}
	timeout = 60 * time.Second
)

func emit(record map[string]interface{}) {
	line, err := json.Marshal(record)
	if err != nil {
		panic(err)
	}
	out.Lock()
	defer out.Unlock()
	fmt.Println(string(line))
}

func body(scenario string, i, size int) []byte {
	unit := fmt.Sprintf("%s:%d;", scenario, i)
	text := strings.Repeat(unit, size/len(unit)+1)
	return []byte(text[:size])
}

func message(topic, scenario, kind string, i, size int) *primitive.Message {
	msg := primitive.NewMessage(topic, body(scenario, i, size))
	msg.WithTag(kind)
	msg.WithKeys([]string{fmt.Sprintf("key-%s-%d", kind, i)})
	msg.WithProperty("kind", kind)
	msg.WithProperty("idx", strconv.Itoa(i))
	msg.WithProperty("size", strconv.Itoa(size))
	return msg
}

func sent(scenario, kind string, i int, result *primitive.SendResult) {
	record := map[string]interface{}{"event": "sent", "scenario": scenario, "kind": kind, "i": i}
	if result != nil {
		record["status"] = int(result.Status)
		record["msgId"] = result.MsgID
		record["queueId"] = result.MessageQueue.QueueId
		record["broker"] = result.MessageQueue.BrokerName
		record["queueOffset"] = result.QueueOffset
	}
	emit(record)
}

func received(scenario, who string, msg *primitive.MessageExt) map[string]interface{} {
	digest := sha256.Sum256(msg.Body)
	return map[string]interface{}{
		"event": "recv", "scenario": scenario, "consumer": who, "topic": msg.Topic,
		"queueId": msg.Queue.QueueId, "broker": msg.Queue.BrokerName, "queueOffset": msg.QueueOffset,
		"msgId": msg.MsgId, "tags": msg.GetTags(), "keys": msg.GetKeys(), "bodyLen": len(msg.Body),
		"bodySha": hex.EncodeToString(digest[:]), "reconsumeTimes": msg.ReconsumeTimes,
		"bornTimestamp": msg.BornTimestamp, "storeTimestamp": msg.StoreTimestamp,
		"receivedAt": time.Now().UnixMilli(), "props": msg.GetProperties(),
	}
}

func resolver() primitive.NsResolver {
	return primitive.NewPassthroughResolver(strings.Split(opts["namesrv"], ";"))
}

func name(scenario, role string) string { return opts["prefix"] + "_" + scenario + "_" + role }

func topicOf(scenario string) string { return opts["prefix"] + "_" + scenario }

func createTopic(topic string, queues int) {
	a, err := admin.NewAdmin(admin.WithResolver(resolver()))
	check(err)
	defer a.Close()
	for _, broker := range strings.Split(opts["broker"], ";") {
		check(a.CreateTopic(context.Background(), admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(broker),
			admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues)))
	}
}

func newProducer(group string, extra ...producer.Option) rocketmq.Producer {
	options := append([]producer.Option{
		producer.WithNsResolver(resolver()), producer.WithGroupName(group), producer.WithInstanceName(group),
		producer.WithRetry(2),
	}, extra...)
	p, err := rocketmq.NewProducer(options...)
	check(err)
	check(p.Start())
	return p
}

type collector struct {
	sync.Mutex
	want int
	got  int
	done chan struct{}
}

func newCollector(want int) *collector { return &collector{want: want, done: make(chan struct{})} }

func (c *collector) add(n int) {
	c.Lock()
	defer c.Unlock()
	c.got += n
	if c.got >= c.want && c.want > 0 {
		c.want = 0
		close(c.done)
	}
}

func (c *collector) wait(what string) {
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.Lock()
		defer c.Unlock()
		panic(fmt.Sprintf("timed out waiting for %s: %d received", what, c.got))
	}
}

func pushConsumer(group, instance, topic string, c *collector, scenario, who string, extra ...consumer.Option) rocketmq.PushConsumer {
	options := append([]consumer.Option{
		consumer.WithNsResolver(resolver()), consumer.WithGroupName(group), consumer.WithInstance(instance),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, extra...)
	pc, err := rocketmq.NewPushConsumer(options...)
	check(err)
	check(pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, msg := range msgs {
			emit(received(scenario, who, msg))
		}
		c.add(len(msgs))
		return consumer.ConsumeSuccess, nil
	}))
	check(pc.Start())
	return pc
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// send: sync (one body above the 4 KiB compression threshold), async and batch sends, consumed back.
func send() {
	scenario, topic := "send", topicOf("send")
	createTopic(topic, 4)
	p := newProducer(name(scenario, "pg"))
	defer p.Shutdown()
	ctx := context.Background()
	for i, size := range []int{6000, 100, 300} {
		result, err := p.SendSync(ctx, message(topic, scenario, "sync", i, size))
		check(err)
		sent(scenario, "sync", i, result)
	}
	var wg sync.WaitGroup
	for i, size := range []int{200, 5000, 64} {
		wg.Add(1)
		index := i
		check(p.SendAsync(ctx, func(ctx context.Context, result *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				emit(map[string]interface{}{"event": "error", "scenario": scenario, "error": err.Error()})
				return
			}
			sent(scenario, "async", index, result)
		}, message(topic, scenario, "async", i, size)))
	}
	wg.Wait()
	var batch []*primitive.Message
	sizes := []int{20, 30, 40, 50}
	for i, size := range sizes {
		batch = append(batch, message(topic, scenario, "batch", i, size))
	}
	result, err := p.SendSync(ctx, batch...)
	check(err)
	for i := range sizes {
		emit(map[string]interface{}{"event": "sent", "scenario": scenario, "kind": "batch", "i": i,
			"status": int(result.Status), "queueId": result.MessageQueue.QueueId,
			"queueOffset": result.QueueOffset + int64(i)})
	}
	c := newCollector(10)
	pc := pushConsumer(name(scenario, "cg"), name(scenario, "c1"), topic, c, scenario, "c1")
	defer pc.Shutdown()
	c.wait("sent messages")
}

// broadcasting: two consumers of one group each receive every message.
func broadcasting() {
	scenario, topic := "broadcasting", topicOf("broadcasting")
	createTopic(topic, 2)
	c := newCollector(12)
	for _, who := range []string{"c1", "c2"} {
		pc := pushConsumer(name(scenario, "cg"), name(scenario, who), topic, c, scenario, who,
			consumer.WithConsumerModel(consumer.BroadCasting))
		defer pc.Shutdown()
	}
	p := newProducer(name(scenario, "pg"))
	defer p.Shutdown()
	for i := 0; i < 6; i++ {
		result, err := p.SendSync(context.Background(), message(topic, scenario, "broadcasting", i, 80))
		check(err)
		sent(scenario, "broadcasting", i, result)
	}
	c.wait("broadcast messages")
}

// orderly: sharding keys pick the queue, an orderly consumer sees each key's messages in order.
func orderly() {
	scenario, topic := "orderly", topicOf("orderly")
	createTopic(topic, 4)
	p := newProducer(name(scenario, "pg"), producer.WithQueueSelector(producer.NewHashQueueSelector()))
	keys := []string{"alpha", "beta", "gamma"}
	for seq := 0; seq < 8; seq++ {
		for _, key := range keys {
			msg := message(topic, scenario, key, seq, 50+seq)
			msg.WithShardingKey(key)
			msg.WithProperty("seq", strconv.Itoa(seq))
			result, err := p.SendSync(context.Background(), msg)
			check(err)
			sent(scenario, key, seq, result)
		}
	}
	check(p.Shutdown())
	c := newCollector(24)
	pc := pushConsumer(name(scenario, "cg"), name(scenario, "c1"), topic, c, scenario, "c1",
		consumer.WithConsumerOrder(true))
	defer pc.Shutdown()
	c.wait("orderly messages")
}

// delay: a message with delay level 3 sent before a plain one arrives after it.
func delay() {
	scenario, topic := "delay", topicOf("delay")
	createTopic(topic, 1)
	p := newProducer(name(scenario, "pg"))
	emit(map[string]interface{}{"event": "sending", "scenario": scenario, "at": time.Now().UnixMilli()})
	delayed := message(topic, scenario, "delayed", 0, 100)
	delayed.WithDelayTimeLevel(3)
	result, err := p.SendSync(context.Background(), delayed)
	check(err)
	sent(scenario, "delayed", 0, result)
	result, err = p.SendSync(context.Background(), message(topic, scenario, "plain", 1, 100))
	check(err)
	sent(scenario, "plain", 1, result)
	check(p.Shutdown())
	c := newCollector(2)
	pc := pushConsumer(name(scenario, "cg"), name(scenario, "c1"), topic, c, scenario, "c1")
	defer pc.Shutdown()
	c.wait("delayed message")
}

type txListener struct{ checked *collector }

func (l *txListener) ExecuteLocalTransaction(msg *primitive.Message) primitive.LocalTransactionState {
	switch msg.GetProperty("decision") {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnknowState
}

func (l *txListener) CheckLocalTransaction(msg *primitive.MessageExt) primitive.LocalTransactionState {
	emit(map[string]interface{}{"event": "check", "scenario": "transaction", "keys": msg.GetKeys(),
		"decision": msg.GetProperty("decision")})
	l.checked.add(1)
	if msg.GetProperty("decision") == "unknown" {
		return primitive.CommitMessageState
	}
	return primitive.RollbackMessageState
}

// transaction: commit, rollback, and unknown committed on check-back.
func transaction() {
	scenario, topic := "transaction", topicOf("transaction")
	createTopic(topic, 1)
	listener := &txListener{checked: newCollector(1)}
	group := name(scenario, "pg")
	p, err := rocketmq.NewTransactionProducer(listener, producer.WithNsResolver(resolver()),
		producer.WithGroupName(group), producer.WithInstanceName(group))
	check(err)
	check(p.Start())
	defer p.Shutdown()
	for i, decision := range []string{"commit", "rollback", "unknown"} {
		msg := message(topic, scenario, decision, i, 100)
		msg.WithProperty("decision", decision)
		result, err := p.SendMessageInTransaction(context.Background(), msg)
		check(err)
		emit(map[string]interface{}{"event": "sent", "scenario": scenario, "kind": decision, "i": i,
			"status": int(result.Status), "msgId": result.MsgID, "localState": int(result.State)})
	}
	c := newCollector(2)
	pc := pushConsumer(name(scenario, "cg"), name(scenario, "c1"), topic, c, scenario, "c1")
	defer pc.Shutdown()
	c.wait("transaction messages")
	listener.checked.wait("a check-back")
}

func run(scenario string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	switch scenario {
	case "send":
		send()
	case "broadcasting":
		broadcasting()
	case "orderly":
		orderly()
	case "delay":
		delay()
	case "transaction":
		transaction()
	default:
		panic("unknown scenario " + scenario)
	}
	return nil
}

func main() {
	for _, arg := range os.Args[1:] {
		kv := strings.SplitN(arg, "=", 2)
		opts[kv[0]] = kv[1]
	}
	if t, ok := opts["timeout"]; ok {
		seconds, err := strconv.Atoi(t)
		check(err)
		timeout = time.Duration(seconds) * time.Second
	}
	failures := 0
	for _, scenario := range strings.Split(opts["scenarios"], ",") {
		started := time.Now()
		emit(map[string]interface{}{"event": "begin", "scenario": scenario})
		err := run(scenario)
		end := map[string]interface{}{"event": "end", "scenario": scenario, "ok": err == nil,
			"millis": time.Since(started).Milliseconds()}
		if err != nil {
			end["error"] = err.Error()
			failures++
		}
		emit(end)
	}
	if failures > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}
